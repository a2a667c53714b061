package rebuild

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func testPositions(done, total int64) *positions {
	return &positions{parts: []*partition{
		{topic: "in", partition: 0, start: 0, end: total / 2, at: min(done, total/2)},
		{topic: "in", partition: 1, start: 100, end: 100 + total - total/2, at: 100 + max(done-total/2, 0)},
	}}
}

func TestProgressBar(t *testing.T) {
	var out bytes.Buffer
	p := NewProgress(&out, ProgressBar, 0)
	p.Width = func() int { return 72 }
	t0 := time.Unix(1000, 0)
	p.begin("rebuild p → t", testPositions(0, 10000), t0)
	if !strings.HasPrefix(out.String(), "rebuild p → t: 10,000 records on 2 partitions") {
		t.Errorf("header: %q", out.String())
	}
	out.Reset()
	p.update(testPositions(2000, 10000), t0.Add(time.Second))
	p.update(testPositions(6000, 10000), t0.Add(2*time.Second))
	line := out.String()[strings.LastIndex(out.String(), "\r")+1:]
	line = strings.TrimSuffix(line, "\033[K")
	if len(line) != 71 {
		t.Errorf("bar line is %d wide, want 71: %q", len(line), line)
	}
	// 6000 in 2 s: 3000/s; 4000 left: ETA 1s.
	for _, want := range []string{"[", "]  60.0%", " 6,000/10,000", "    3,000/s", "ETA 1s"} {
		if !strings.Contains(line, want) {
			t.Errorf("bar %q lacks %q", line, want)
		}
	}
	if barW := strings.Index(line, "]") - 1; strings.Count(line, "=") != barW*60/100 {
		t.Errorf("bar of %d columns has %d '=' in %q", barW, strings.Count(line, "="), line)
	}
	// Log lines clear the bar and draw it again.
	var logs bytes.Buffer
	lw := p.LogWriter(&logs)
	out.Reset()
	lw.Write([]byte("level=INFO msg=x\n"))
	if !strings.HasPrefix(out.String(), "\r\033[K") || !strings.Contains(out.String(), "60.0%") || logs.String() != "level=INFO msg=x\n" {
		t.Errorf("around a log line: %q / %q", out.String(), logs.String())
	}
	out.Reset()
	p.end(testPositions(10000, 10000), t0.Add(3*time.Second), true)
	if !strings.Contains(out.String(), "100.0%") || !strings.HasSuffix(out.String(), "\n") {
		t.Errorf("end: %q", out.String())
	}
	// A narrow terminal drops the bar, never wraps.
	p.Width = func() int { return 30 }
	out.Reset()
	p.update(testPositions(5000, 10000), t0.Add(4*time.Second))
	if line := strings.TrimSuffix(strings.TrimPrefix(out.String(), "\r"), "\033[K"); len(line) > 29 || strings.Contains(line, "[") {
		t.Errorf("narrow: %q", line)
	}
}

func TestProgressLines(t *testing.T) {
	var out bytes.Buffer
	p := NewProgress(&out, ProgressLines, 5*time.Second)
	if p.LogWriter(&out) != &out {
		t.Error("lines mode wraps the log writer")
	}
	t0 := time.Unix(1000, 0)
	p.begin("rebuild p → t", testPositions(0, 1000), t0)
	for i := 1; i <= 10; i++ {
		p.update(testPositions(int64(i*50), 1000), t0.Add(time.Duration(i)*time.Second))
	}
	p.end(testPositions(1000, 1000), t0.Add(11*time.Second), true)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	// header, a line at 5s and at 10s, the end line.
	if len(lines) != 4 || !strings.Contains(lines[1], " 25.0%  250/1,000 records  50 records/s  ETA 15s") ||
		!strings.Contains(lines[3], "done: 100.0%") || strings.Contains(out.String(), "\r") {
		t.Errorf("lines:\n%s", out.String())
	}
	out.Reset()
	q := NewProgress(&out, ProgressNone, 0)
	q.begin("x", testPositions(0, 10), t0)
	q.update(testPositions(5, 10), t0.Add(time.Minute))
	q.end(testPositions(10, 10), t0.Add(time.Minute), true)
	if out.Len() != 0 {
		t.Errorf("none mode wrote %q", out.String())
	}
}

func TestParseProgressMode(t *testing.T) {
	var buf bytes.Buffer
	for in, want := range map[string]ProgressMode{"auto": ProgressLines, "bar": ProgressBar, "lines": ProgressLines, "none": ProgressNone} {
		if got, err := ParseProgressMode(in, &buf); err != nil || got != want {
			t.Errorf("%s: %v %v", in, got, err)
		}
	}
	if _, err := ParseProgressMode("fancy", &buf); err == nil {
		t.Error("fancy accepted")
	}
	if IsTerminal(&buf) {
		t.Error("a buffer is a terminal")
	}
}

func TestFormatting(t *testing.T) {
	for in, want := range map[time.Duration]string{850 * time.Millisecond: "850ms", 12 * time.Second: "12s",
		184 * time.Second: "3m04s", 2*time.Hour + 5*time.Minute: "2h05m"} {
		if got := fmtDuration(in); got != want {
			t.Errorf("fmtDuration(%s) = %s", in, got)
		}
	}
}
