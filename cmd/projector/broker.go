package main

import (
	"context"
	"fmt"
	"io"

	"github.com/projector-dev/projector/internal/app/broker"
)

// runBroker is `projector broker`: the embedded, persistent, single-node
// Kafka-compatible broker (kfake) in its own process, until SIGTERM/SIGINT.
// It is for development, demos and the soak test (which kills workers with
// SIGKILL while the broker lives on in another process, and restarts the
// broker itself under load); production points kafka.brokers at a real
// cluster.
//
// Once listening it prints one line to stdout, "listening on HOST:PORT", so
// that a parent process can wait for it. With --registry it also serves the
// embedded Schema Registry (srfake, its schemas journaled in --dir) and
// prints "schema registry on URL" after that line.
func runBroker(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("broker", "  projector broker --dir ./data/broker --listen 127.0.0.1:9092 --partitions 4\n  projector broker --dir ./data/broker --registry 127.0.0.1:8081")
	dir := fs.String("dir", "", "directory persisting the broker's log (required: the broker survives restarts)")
	listen := fs.String("listen", "127.0.0.1:9092", "host:port to listen on (port 0 picks a free port)")
	partitions := fs.Int("partitions", 4, "partitions of auto-created topics")
	registry := fs.String("registry", "", "also serve an embedded Schema Registry (franz-go's srfake, Confluent-compatible REST) on this host:port, its schemas kept in --dir (development: point schemaRegistry.url at it)")
	syncWrites := fs.Bool("sync", false, "fsync every produced batch (slower; survives power loss, not only process death)")
	if err := fs.parse(args, stdout); err != nil {
		return err
	}
	if *dir == "" {
		return usageError{"broker: --dir is required"}
	}
	if *partitions <= 0 {
		return usageError{fmt.Sprintf("broker: --partitions must be ≥ 1, got %d", *partitions)}
	}
	b, err := broker.Start(broker.Options{Dir: *dir, Listen: *listen, Partitions: *partitions, SyncWrites: *syncWrites})
	if err != nil {
		return err
	}
	defer b.Close() // persists the log to dir
	fmt.Fprintf(stdout, "listening on %s\n", b.Addr())
	fmt.Fprintf(stderr, "projector broker: embedded single-node broker (development, demos, tests) on %s, data in %s; SIGTERM to stop\n", b.Addr(), *dir)
	if *registry != "" {
		reg, err := broker.StartRegistry(*registry, *dir)
		if err != nil {
			return err
		}
		defer reg.Close()
		fmt.Fprintf(stdout, "schema registry on %s\n", reg.URL())
		fmt.Fprintf(stderr, "projector broker: embedded Schema Registry (srfake) on %s, schemas journaled in %s\n", reg.URL(), *dir)
	}
	<-ctx.Done()
	return nil
}
