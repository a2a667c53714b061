// The setup of `projector bench restore` kept for later invocations, and the
// transport floor each run is compared with.

package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/core/topicread"
	"github.com/projector-dev/projector/processor"
)

// setupFile, in a size's directory, records a finished setup: its broker
// log (the directory "broker" beside it) holds the input, the group's
// committed offsets at its end and the changelog the setup worker left.
// It is written last, so a setup that was interrupted has none and is done
// again from scratch.
const setupFile = "setup.json"

// setupRecord is setupFile's content: what the setup was made with (a
// later invocation reuses it only with the same options) and what it
// measured.
type setupRecord struct {
	Partitions int
	Seed       uint64
	Chunk      int
	Size       RestoreSize // without Runs
}

// loadSetup returns the setup an earlier invocation finished in dir for n
// aggregates with o's options, or nil when there is none: then any broker
// log left in dir by an unfinished setup is removed, so that the setup
// starts on an empty broker. A setup made with other options is an error
// rather than silently replaced.
func loadSetup(dir string, o RestoreOptions, n int) (*RestoreSize, error) {
	b, err := os.ReadFile(filepath.Join(dir, setupFile))
	if errors.Is(err, fs.ErrNotExist) {
		if err := os.RemoveAll(filepath.Join(dir, "broker")); err != nil {
			return nil, fmt.Errorf("bench restore: remove an unfinished setup: %w", err)
		}
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("bench restore: %w", err)
	}
	var rec setupRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, fmt.Errorf("bench restore: %s: %w", filepath.Join(dir, setupFile), err)
	}
	if rec.Partitions != o.Partitions || rec.Seed != o.Seed || rec.Chunk != o.Chunk || rec.Size.Aggregates != n {
		return nil, fmt.Errorf("bench restore: %s holds a setup of %d aggregates on %d partitions (seed %d, chunk %d), not of these options: remove the directory or pass another --dir",
			dir, rec.Size.Aggregates, rec.Partitions, rec.Seed, rec.Chunk)
	}
	return &rec.Size, nil
}

// saveSetup records a finished setup of s in dir (setupFile).
func saveSetup(dir string, o RestoreOptions, s RestoreSize) error {
	s.Runs = nil
	b, err := json.MarshalIndent(setupRecord{Partitions: o.Partitions, Seed: o.Seed, Chunk: o.Chunk, Size: s}, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, setupFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("bench restore: %w", err)
	}
	return os.Rename(tmp, filepath.Join(dir, setupFile))
}

// FloorRead is the transport floor of a restore: a plain kgo consumer
// (read_committed, one client, every changelog partition at once, in the
// bench's process) reading every committed record of the changelog from
// the same broker, doing nothing with them.
type FloorRead struct {
	Records int64
	Took    time.Duration
}

// Rate is the floor's records per second.
func (f FloorRead) Rate() float64 {
	if f.Took <= 0 {
		return 0
	}
	return float64(f.Records) / f.Took.Seconds()
}

// restoreFloor measures the floor (FloorRead) on the broker at addr.
func restoreFloor(ctx context.Context, addr string) (FloorRead, error) {
	var f FloorRead
	t0 := time.Now()
	err := topicread.Committed(ctx, []kgo.Opt{kgo.SeedBrokers(addr)}, processor.ChangelogTopic(restoreName, inputTopic),
		func(*kgo.Record) { f.Records++ })
	f.Took = time.Since(t0)
	if err != nil {
		return f, fmt.Errorf("bench restore: the floor's read of the changelog: %w", err)
	}
	return f, nil
}
