package projection

import "testing"

func TestParsePolicy(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Policy
		ok   bool
	}{
		{"", Wait, true}, {"wait", Wait, true}, {"skip", Skip, true}, {"deadletter", DeadLetter, true},
		{"Skip", Wait, false}, {"dead-letter", Wait, false}, {"none", Wait, false},
	} {
		got, err := ParsePolicy(c.in)
		if got != c.want || (err == nil) != c.ok {
			t.Errorf("ParsePolicy(%q) = %v, %v; want %v, ok %v", c.in, got, err, c.want, c.ok)
		}
	}
	if err := func() error { _, err := ParsePolicy("x"); return err }(); err == nil ||
		err.Error() != `projection: unknown gap policy "x" (want wait, skip or deadletter)` {
		t.Errorf("error = %v", err)
	}
	for p, want := range map[Policy]string{Wait: "wait", Skip: "skip", DeadLetter: "deadletter", 7: "wait"} {
		if got := p.String(); got != want {
			t.Errorf("Policy(%d).String() = %q, want %q", p, got, want)
		}
	}
}
