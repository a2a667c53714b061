//go:build linux || darwin

package rebuild

import (
	"os"
	"syscall"
	"unsafe"
)

// ttyWidth asks the terminal for its width (0 when f is not a terminal).
func ttyWidth(f *os.File) int {
	var ws struct{ rows, cols, x, y uint16 }
	_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), uintptr(syscall.TIOCGWINSZ), uintptr(unsafe.Pointer(&ws)))
	if errno != 0 {
		return 0
	}
	return int(ws.cols)
}
