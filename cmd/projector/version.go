package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// buildVersion describes the binary from the build information the Go
// toolchain embeds: the module version ("(devel)" for a plain `go build` in
// a work tree, a tag for `go install …@vX`), the VCS revision and whether the
// tree was modified (present when built inside a git checkout with
// -buildvcs, the default), and the Go version. Fields the toolchain did not
// record are reported as "unknown" rather than left blank, so that an
// operator can tell "not recorded" from "empty".
func buildVersion(info *debug.BuildInfo, ok bool) string {
	version, revision, modified, vcsTime := "unknown", "unknown", "", ""
	goVersion := runtime.Version()
	if ok && info != nil {
		if info.Main.Version != "" {
			version = info.Main.Version
		}
		if info.GoVersion != "" {
			goVersion = info.GoVersion
		}
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				revision = s.Value
			case "vcs.modified":
				if s.Value == "true" {
					modified = " (modified)"
				}
			case "vcs.time":
				vcsTime = s.Value
			}
		}
	}
	out := fmt.Sprintf("projector %s\nrevision: %s%s\n", version, revision, modified)
	if vcsTime != "" {
		out += "commit time: " + vcsTime + "\n"
	}
	return out + "go: " + goVersion + "\n"
}

// runVersion is `projector version` (and `projector --version`).
func runVersion(_ context.Context, args []string, stdout, _ io.Writer) error {
	if err := newFlags("version", "  projector version\n  projector --version").parse(args, stdout); err != nil {
		return err
	}
	info, ok := debug.ReadBuildInfo()
	fmt.Fprint(stdout, buildVersion(info, ok))
	return nil
}
