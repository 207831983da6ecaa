package faultproxy_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/claimbus/claimbus/internal/faultproxy"
)

// A black hole holds what is sent, and Heal delivers it in order.
func Example() {
	// An echo server stands for the real one.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer ln.Close()
	echoed := make(chan struct{})
	go func() {
		defer close(echoed)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = io.Copy(c, c)
	}()

	p, err := faultproxy.New(ln.Addr().String())
	if err != nil {
		panic(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		panic(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 4)

	_, _ = c.Write([]byte("ping"))
	_, _ = io.ReadFull(c, buf)
	fmt.Printf("%s\n", buf)

	p.BlackHole()
	_, _ = c.Write([]byte("held"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = p.Await(ctx, func(s faultproxy.Stats) bool { return s.Held == 1 })
	fmt.Println("held chunks:", p.Stats().Held)

	p.Heal()
	_, _ = io.ReadFull(c, buf)
	fmt.Printf("%s\n", buf)

	_ = c.Close()
	<-echoed // the server saw the close
	// Output:
	// ping
	// held chunks: 1
	// held
}
