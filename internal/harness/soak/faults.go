package soak

import (
	"context"
	"fmt"
	"time"
)

// faults runs the fault slots: each life lives a random while after its
// first commit, then takes a SIGKILL, or the broker restarts under it. It
// ends after the last slot's restart is measured and the input is all
// produced.
func (r *run) faults(ctx context.Context) error {
	o := &r.o
	// Which fault slots restart the broker instead of a SIGKILL.
	slots := o.Kills + o.BrokerRestarts
	restartAt := map[int]bool{}
	for len(restartAt) < min(o.BrokerRestarts, max(slots-1, 0)) {
		restartAt[1+r.rng.IntN(max(slots-1, 1))] = true
	}
	if err := r.startWorker(ctx, false); err != nil {
		return err
	}
	for slot := 0; slot < slots; {
		next, stop, err := r.fault(ctx, slot, restartAt)
		if err != nil {
			return err
		}
		if stop {
			r.logf("stopping the kills early: %s", r.res.StoppedEarly)
			break
		}
		slot = next
	}
	return r.lastRestart(ctx)
}

// fault runs one pass of the fault loop for slot: it waits for the life's
// first commit, lets it live, and strikes. It returns the next slot, and
// stop when the kills end early (Result.StoppedEarly says why).
func (r *run) fault(ctx context.Context, slot int, restartAt map[int]bool) (next int, stop bool, err error) {
	if err := ctx.Err(); err != nil {
		r.w.kill()
		return slot, false, err
	}
	if err := r.w.waitStarted(2 * time.Minute); err != nil {
		r.w.kill()
		return slot, false, err
	}
	moved, exited, err := r.firstCommit(ctx)
	if err != nil || exited {
		return slot, false, err
	}
	if r.afterKill {
		r.restarted(moved)
		if r.o.StopAfterSlow > 0 && r.slow >= r.o.StopAfterSlow {
			r.res.StoppedEarly = fmt.Sprintf("%d restarts took longer than %s to commit", r.slow, r.o.RestartBound)
			return slot, true, nil
		}
	}
	// Offsets at the life's first commit, for killWorker's "moving".
	atFirst, err := r.off.readRetry(ctx, time.Minute)
	if err != nil {
		r.w.kill()
		return slot, false, err
	}
	pending, err := r.live(ctx)
	if err != nil {
		return slot, false, err
	}
	if !r.in.producing && pending == 0 && !r.w.hasExited() {
		// A restart now would find nothing to commit.
		r.res.StoppedEarly = fmt.Sprintf("the input ran out after %d kills (more --events or a lower --rate)", len(r.res.Kills))
		return slot, true, nil
	}
	if r.w.hasExited() {
		return slot, false, r.selfExit(ctx)
	}
	slot++
	if restartAt[slot] {
		return slot, false, r.restartBroker(ctx, slot)
	}
	return slot, false, r.killWorker(ctx, moved, atFirst, pending)
}

// firstCommit waits for the life's first committed transaction (a kill
// during the group join tests little, and after a kill this is the restart
// latency). exited says the worker exited while waiting; it was restarted.
func (r *run) firstCommit(ctx context.Context) (m moved, exited bool, err error) {
	m, err = r.off.waitMoved(ctx, r.base, r.w, r.o.FirstCommitTimeout)
	if err != nil {
		r.w.kill()
		return m, false, fmt.Errorf("soak: life %d: %w: %s", r.life, err, r.w.tail())
	}
	if m.by == "" { // exited while waiting
		return m, true, r.selfExit(ctx)
	}
	return m, false, nil
}

// live lets the worker live a random while under load, then waits for the
// next moment the processor has input it has not committed (the input
// arrives every 50ms and is often processed within a few ms; striking then
// puts the kill inside its work). It returns the input records pending.
func (r *run) live(ctx context.Context) (int64, error) {
	d := r.o.KillMin + time.Duration(r.rng.Int64N(int64(r.o.KillMax-r.o.KillMin)))
	select {
	case <-time.After(d):
	case <-r.w.exited:
	}
	pending := r.off.waitPending(ctx, r.w, time.Second)
	if err := r.in.inputDone(false); err != nil {
		r.w.kill()
		return pending, err
	}
	return pending, nil
}

// restartBroker restarts the broker under load instead of this slot's
// SIGKILL; the worker lives through it or exits and is restarted.
func (r *run) restartBroker(ctx context.Context, slot int) error {
	r.in.brokerMu.Lock()
	r.logf("restarting the broker (fault %d)", slot)
	err := r.br.restart(ctx)
	r.in.brokerMu.Unlock()
	if err != nil {
		r.w.kill()
		return err
	}
	r.res.BrokerRestarts++
	// The kill that follows waits for this life's progress after the broker
	// came back.
	if r.base, err = r.off.readRetry(ctx, time.Minute); err != nil {
		r.w.kill()
		return err
	}
	return nil
}

// killWorker SIGKILLs the life, records the kill, and starts the next life.
// A kill counts as "while offsets move" only if the processor committed
// again after its first commit (atFirst): the first commit itself is what
// firstCommit waited for, so it proves nothing.
func (r *run) killWorker(ctx context.Context, moved moved, atFirst commits, pending int64) error {
	k := Kill{Life: r.life, Lived: time.Since(moved.at), Pending: pending}
	now, cerr := r.off.read(ctx)
	r.w.kill()
	k.Moving = cerr == nil && now.proc > atFirst.proc
	r.res.Kills = append(r.res.Kills, k)
	if k.Moving {
		r.res.KillsMoving++
	}
	if k.Pending > 0 {
		r.res.KillsPending++
	}
	r.res.Figure.Crashes++
	r.countRestore()
	r.logf("kill %d/%d: life %d killed %s after its first commit; processor offsets moving %t, %d input records pending",
		len(r.res.Kills), r.o.Kills, r.life, k.Lived.Round(time.Millisecond), k.Moving, k.Pending)
	// A commit the dead process sent just before its kill may still be
	// landing: let it, so it is not taken for the next life's.
	time.Sleep(50 * time.Millisecond) // sleep ok: the killed process leaves no signal; the checks wait for conditions
	return r.startWorker(ctx, true)
}

// lastRestart measures the last kill's restart like the others (the input is
// still paced, so it has records waiting), then lets the rest of the input
// follow at once and waits until it is produced.
func (r *run) lastRestart(ctx context.Context) error {
	if r.afterKill {
		m, err := r.off.waitMoved(ctx, r.base, r.w, r.o.FirstCommitTimeout)
		if err != nil {
			r.w.kill()
			return fmt.Errorf("soak: life %d: %w: %s", r.life, err, r.w.tail())
		}
		if m.by != "" {
			r.restarted(m)
		}
	}
	r.res.RestartLatency = Summarise(r.latencies, r.o.RestartBound)
	if len(r.res.Kills) > 0 {
		r.logf("restart → first commit: %s", r.res.RestartLatency)
		r.logf("kills while offsets moving: %d/%d; with input pending: %d/%d", r.res.KillsMoving, len(r.res.Kills), r.res.KillsPending, len(r.res.Kills))
	}
	close(r.in.unthrottle)
	if err := r.in.inputDone(true); err != nil {
		r.w.kill()
		return err
	}
	return nil
}
