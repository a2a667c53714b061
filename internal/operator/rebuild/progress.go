package rebuild

import (
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/projector-dev/projector/internal/operator/humanize"
)

// ProgressMode selects how progress is shown.
type ProgressMode int

// Progress modes.
const (
	// ProgressNone shows nothing.
	ProgressNone ProgressMode = iota
	// ProgressLines prints a line every interval (logs, pipes, CI).
	ProgressLines
	// ProgressBar redraws one line in place with a bar, the rate and the ETA
	// (a terminal).
	ProgressBar
)

// ParseProgressMode parses auto|bar|lines|none; auto is a bar when out is a
// terminal, else lines.
func ParseProgressMode(s string, out io.Writer) (ProgressMode, error) {
	switch s {
	case "auto", "":
		if IsTerminal(out) {
			return ProgressBar, nil
		}
		return ProgressLines, nil
	case "bar":
		return ProgressBar, nil
	case "lines":
		return ProgressLines, nil
	case "none":
		return ProgressNone, nil
	}
	return ProgressNone, fmt.Errorf("%q is not auto, bar, lines or none", s)
}

// IsTerminal reports whether w is a character device (a terminal).
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// DefaultProgressInterval is the line interval of ProgressLines.
const DefaultProgressInterval = 5 * time.Second

// rateWindow is the span over which the rate (and so the ETA) is measured.
const rateWindow = 5 * time.Second

// Progress reports a rebuild's progress to out. It is safe for concurrent use.
type Progress struct {
	mu       sync.Mutex
	out      io.Writer
	mode     ProgressMode
	interval time.Duration
	// Width returns the terminal width for the bar (default: the terminal's
	// when out is one, else $COLUMNS, else 80).
	Width func() int

	label    string
	began    time.Time
	lastLine time.Time
	samples  []sample
	drawn    string // the bar line on screen; "" when none
}

type sample struct {
	t    time.Time
	done int64
}

// NewProgress returns a reporter; interval applies to ProgressLines (default
// DefaultProgressInterval).
func NewProgress(out io.Writer, mode ProgressMode, interval time.Duration) *Progress {
	if interval <= 0 {
		interval = DefaultProgressInterval
	}
	return &Progress{out: out, mode: mode, interval: interval, Width: func() int { return termWidth(out) }}
}

// LogWriter wraps the writer of log lines that share the terminal with the
// bar: the bar is cleared before a log line and drawn again after it.
func (p *Progress) LogWriter(w io.Writer) io.Writer {
	if p == nil || p.mode != ProgressBar {
		return w
	}
	return logWriter{p, w}
}

type logWriter struct {
	p *Progress
	w io.Writer
}

func (l logWriter) Write(b []byte) (int, error) {
	l.p.mu.Lock()
	defer l.p.mu.Unlock()
	if l.p.drawn != "" {
		io.WriteString(l.p.out, "\r\033[K")
	}
	n, err := l.w.Write(b)
	if l.p.drawn != "" {
		io.WriteString(l.p.out, l.p.drawn)
	}
	return n, err
}

func (p *Progress) begin(label string, pos *positions, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.label, p.began, p.lastLine = label, now, now
	p.samples = []sample{{now, pos.progress()}}
	if p.mode == ProgressNone {
		return
	}
	from := "from the start"
	if pos.resumed {
		from = "resuming from the group's committed offsets"
	}
	fmt.Fprintf(p.out, "%s: %s records on %d partitions to the end offsets taken now (%s)\n",
		label, humanize.Thousands(pos.total()), len(pos.parts), from)
	if p.mode == ProgressBar {
		p.draw(pos, now)
	}
}

func (p *Progress) update(pos *positions, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.samples = append(p.samples, sample{now, pos.progress()})
	// Keep one sample at or before the window's start.
	i := 0
	for i+1 < len(p.samples) && now.Sub(p.samples[i+1].t) >= rateWindow {
		i++
	}
	p.samples = p.samples[i:]
	switch p.mode {
	case ProgressBar:
		p.draw(pos, now)
	case ProgressLines:
		if now.Sub(p.lastLine) >= p.interval {
			p.lastLine = now
			fmt.Fprintf(p.out, "%s: %s\n", p.label, p.status(pos, now, true))
		}
	}
}

func (p *Progress) end(pos *positions, now time.Time, completed bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch p.mode {
	case ProgressBar:
		p.draw(pos, now)
		io.WriteString(p.out, "\n")
		p.drawn = ""
	case ProgressLines:
		word := "stopped"
		if completed {
			word = "done"
		}
		fmt.Fprintf(p.out, "%s: %s: %s\n", p.label, word, p.status(pos, now, false))
	}
}

// rate is records/s over the window (0 when unknown).
func (p *Progress) rate() float64 {
	if len(p.samples) < 2 {
		return 0
	}
	a, b := p.samples[0], p.samples[len(p.samples)-1]
	if d := b.t.Sub(a.t).Seconds(); d > 0 {
		return float64(b.done-a.done) / d
	}
	return 0
}

// status is "45.2%  123,456/273,000 records  52,340 records/s  ETA 3s".
func (p *Progress) status(pos *positions, now time.Time, eta bool) string {
	done, total := pos.progress(), pos.total()
	s := fmt.Sprintf("%5.1f%%  %s/%s records  %s records/s", percent(done, total), humanize.Thousands(done), humanize.Thousands(total), humanize.Thousands(int64(p.rate())))
	if eta {
		s += "  ETA " + p.eta(done, total)
	} else {
		s += "  in " + fmtDuration(now.Sub(p.began))
	}
	return s
}

func (p *Progress) eta(done, total int64) string {
	if done >= total {
		return "0s"
	}
	r := p.rate()
	if r <= 0 {
		return "--"
	}
	d := time.Duration(float64(total-done) / r * float64(time.Second))
	if d < time.Second {
		return "<1s"
	}
	return fmtDuration(d)
}

// draw redraws the bar line: "[=====>    ]  45.2%  123,456/273,000  52,340/s  ETA 3s",
// fitted to the terminal width.
func (p *Progress) draw(pos *positions, now time.Time) {
	done, total := pos.progress(), pos.total()
	// Fixed-width fields keep the bar's length steady as the numbers change.
	tot := humanize.Thousands(total)
	tail := fmt.Sprintf(" %5.1f%%  %*s/%s  %9s/s  ETA %-6s", percent(done, total), len(tot), humanize.Thousands(done), tot,
		humanize.Thousands(int64(p.rate())), p.eta(done, total))
	w := 80
	if p.Width != nil {
		if n := p.Width(); n > 0 {
			w = n
		}
	}
	w-- // never write the last column: some terminals wrap there
	line := tail
	if barW := w - len(tail) - 2; barW >= 10 {
		fill := int(float64(barW) * percent(done, total) / 100)
		bar := strings.Repeat("=", fill)
		if fill < barW {
			bar += ">" + strings.Repeat(" ", barW-fill-1)
		}
		line = "[" + bar + "]" + tail
	} else if len(line) > w {
		line = line[:max(w, 0)]
	}
	p.drawn = "\r" + line + "\033[K"
	io.WriteString(p.out, p.drawn)
}

func percent(done, total int64) float64 {
	if total <= 0 {
		return 100
	}
	return math.Min(100, 100*float64(done)/float64(total))
}

// fmtDuration rounds to what a person reads: 850ms, 12s, 3m04s, 2h05m.
func fmtDuration(d time.Duration) string {
	switch {
	case d < time.Second:
		return d.Round(10 * time.Millisecond).String()
	case d < time.Minute:
		return d.Round(time.Second).String()
	case d < time.Hour:
		d = d.Round(time.Second)
		return fmt.Sprintf("%dm%02ds", int(d/time.Minute), int(d%time.Minute/time.Second))
	}
	d = d.Round(time.Minute)
	return fmt.Sprintf("%dh%02dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
}

// termWidth is w's terminal width, else $COLUMNS, else 80.
func termWidth(w io.Writer) int {
	if f, ok := w.(*os.File); ok {
		if n := ttyWidth(f); n > 0 {
			return n
		}
	}
	if n, err := strconv.Atoi(os.Getenv("COLUMNS")); err == nil && n > 0 {
		return n
	}
	return 80
}
