// Command example_app is the example service of claimbus.
//
// With no arguments it runs a demo on an embedded SQLite database in a
// temporary directory, and prints what happened:
//
//	go run ./example_app
//
// With serve it runs the HTTP API: by default one node on an embedded
// SQLite file, or with -db on PostgreSQL, where several nodes may share
// one database:
//
//	go run ./example_app serve
//	go run ./example_app serve -addr 127.0.0.1:8080 -node a -db postgres://postgres@127.0.0.1:5432/claimbus
//
// See README.md beside this file.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

const usage = `usage:
  example_app                  run the demo on an embedded SQLite database
  example_app serve [flags]    run the HTTP API on an embedded SQLite file, or on PostgreSQL with -db URL (example_app serve -h for the flags)
  example_app storm [flags]    send a storm of sign-ups to nodes, then check them (example_app storm -h)
  example_app pg [flags]       start a throwaway PostgreSQL for several nodes, print its URL (example_app pg -h)
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// The first signal starts a graceful shutdown; a second one kills.
	context.AfterFunc(ctx, stop)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run runs the subcommand args name and returns the exit code: 0 on
// success, 1 when it failed, 2 for a usage error.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "demo" {
		if len(args) > 1 {
			fmt.Fprintf(stderr, "example_app: the demo takes no arguments, got %q\n\n%s", args[1:], usage)
			return 2
		}
		if _, err := runDemo(ctx, stdout); err != nil {
			fmt.Fprintln(stderr, "example_app: demo:", err)
			return 1
		}
		return 0
	}
	switch args[0] {
	case "serve":
		return serve(ctx, args[1:], stdout, stderr)
	case "storm":
		return stormCmd(ctx, args[1:], stdout, stderr)
	case "pg":
		return pgCmd(ctx, args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "example_app: unknown command %q\n\n%s", args[0], usage)
	return 2
}
