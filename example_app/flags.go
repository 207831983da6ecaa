package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
)

// parseFlags parses args into fs, whose name is the command's. A flag fs
// does not have, or a bad value, is one line on stderr naming it and -h,
// not the whole usage: the usage is for -h, which prints it on stderr.
// It returns false when the command stops there, with its exit code: 0
// after -h, 2 for a usage error.
func parseFlags(fs *flag.FlagSet, args []string, stderr io.Writer) (ok bool, code int) {
	usage := fs.Usage
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.Usage = usage
	fs.SetOutput(stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.Usage()
		return false, 0
	case err != nil:
		fmt.Fprintf(stderr, "%s: %v (%s -h lists the flags)\n", fs.Name(), err, fs.Name())
		return false, 2
	}
	return true, 0
}
