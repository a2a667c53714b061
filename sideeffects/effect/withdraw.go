package effect

import (
	"fmt"
	"time"
)

// Withdraw takes back attempt n, which started at start and whose call
// never left (its Runner found too little of the attempt's time left once
// the in-flight mark was committed, or its Caller reported the request not
// sent): in-flight or unknown → pending, due at next, with the attempt
// removed from the history and not counted. The entry must still be at
// attempt n as Start wrote it – in-flight, or unknown after the next
// owner's Recover – or the withdrawal is stale and refused; n and start
// together name the attempt, since a withdrawn attempt's number is used
// again by the next one.
func (l *Ledger) Withdraw(key string, n int, start, next, now time.Time) (Entry, error) {
	e, err := l.mustGet(key)
	if err != nil {
		return Entry{}, err
	}
	last := len(e.History) - 1
	if (e.Status != InFlight && e.Status != Unknown) || e.Attempts != n || last < 0 || e.History[last].N != n || !e.History[last].Start.Equal(start) {
		return e, &TransitionError{Key: key, Op: fmt.Sprintf("withdraw attempt %d started %s (the last is %d)", n, start.Format(time.RFC3339Nano), e.Attempts), From: e.Status}
	}
	e.History = e.History[:last]
	e.Attempts--
	e.Status = Pending
	e.NextAttempt = next
	e.Updated = now
	return e, l.put(&e)
}
