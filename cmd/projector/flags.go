package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/spf13/pflag"

	"github.com/projector-dev/projector/internal/app/config"
)

// cmdFlags is how every command builds its flags: a FlagSet named after
// the command, the common flags (commonFlags) of the commands that load a
// configuration, the example its --help prints and how many positional
// arguments it takes. A command states only its own flags on it.
type cmdFlags struct {
	*pflag.FlagSet
	common  commonFlags
	example string
	nargs   int // exact positional arguments wanted; 0: none allowed
}

// newFlags starts the flag set of command name ("gaps list"); --help prints
// its flags and example.
func newFlags(name, example string) *cmdFlags {
	return &cmdFlags{FlagSet: pflag.NewFlagSet(name, pflag.ContinueOnError), example: example}
}

// withConfig adds the common flags: --config (required or optional),
// --brokers, --log-level and --log-format.
func (f *cmdFlags) withConfig(required bool) *cmdFlags {
	f.common.register(f.FlagSet, required)
	return f
}

// withLogLevel adds --log-level (default def) alone, for the commands that
// log as text without a configuration; of names what logs.
func (f *cmdFlags) withLogLevel(def, of string) *cmdFlags {
	f.common.logFormat = "text"
	f.StringVar(&f.common.logLevel, "log-level", def, "log level of the "+of+": debug, info, warn, error")
	return f
}

// takes makes the command want exactly n positional arguments (fs.Arg).
func (f *cmdFlags) takes(n int) *cmdFlags {
	f.nargs = n
	return f
}

// parse parses a command's flags; --help prints usage and the example and
// returns pflag.ErrHelp, anything else wrong is a usageError.
func (f *cmdFlags) parse(args []string, stdout io.Writer) error {
	f.SetOutput(io.Discard)
	f.Usage = func() {}
	err := f.Parse(args)
	switch {
	case errors.Is(err, pflag.ErrHelp):
		fmt.Fprintf(stdout, "Usage of projector %s:\n%s\nExample:\n%s\n", f.Name(), f.FlagUsages(), f.example)
		return err
	case err != nil:
		return usageError{fmt.Sprintf("%s: %v", f.Name(), err)}
	case f.nargs > 0 && f.NArg() != f.nargs:
		return usageError{fmt.Sprintf("%s: want %d argument(s), got %d", f.Name(), f.nargs, f.NArg())}
	case f.nargs == 0 && f.NArg() > 0:
		return usageError{fmt.Sprintf("%s: unexpected argument %q", f.Name(), strings.Join(f.Args(), " "))}
	}
	return nil
}

// commonFlags are shared by the commands that load a configuration.
type commonFlags struct {
	config    string
	brokers   string
	logLevel  string
	logFormat string
}

func (c *commonFlags) register(fs *pflag.FlagSet, configRequired bool) {
	help := "configuration file (YAML)"
	if !configRequired {
		help += " (optional)"
	}
	fs.StringVarP(&c.config, "config", "c", "", help)
	fs.StringVar(&c.brokers, "brokers", "", "comma-separated broker addresses, or 'embedded'; overrides kafka.brokers")
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&c.logFormat, "log-format", "text", "log format: text or json")
}

func (c *commonFlags) logger(w io.Writer) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(c.logLevel)); err != nil {
		return nil, usageError{fmt.Sprintf("--log-level: %q is not one of debug, info, warn, error", c.logLevel)}
	}
	o := &slog.HandlerOptions{Level: lvl}
	switch c.logFormat {
	case "text":
		return slog.New(slog.NewTextHandler(w, o)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, o)), nil
	}
	return nil, usageError{fmt.Sprintf("--log-format: %q is not text or json", c.logFormat)}
}

// load reads the configuration and applies --brokers.
func (c *commonFlags) load() (*config.Config, error) {
	if c.config == "" {
		return nil, usageError{"--config is required"}
	}
	cfg, err := config.Load(c.config)
	if err != nil {
		return nil, err
	}
	if c.brokers != "" {
		if err := cfg.Kafka.SetBrokers(c.brokers); err != nil {
			return nil, &config.Error{Key: "kafka.brokers", Msg: "--brokers: " + err.Error()}
		}
		cfg.ApplyDefaults()
		if err := cfg.Validate(); err != nil {
			return nil, err
		}
	}
	return cfg, nil
}
