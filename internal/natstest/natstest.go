package natstest

import (
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// readyTimeout bounds the wait for a server to accept connections.
const readyTimeout = 10 * time.Second

// Server is a NATS server with JetStream in this process, on 127.0.0.1,
// storing its streams in a directory of the test's.
type Server struct {
	t        testing.TB
	storeDir string

	mu   sync.Mutex
	srv  *server.Server // nil while stopped
	port int            // fixed after the first start, so a restart keeps the URL
}

// Start starts a server for t on a free port, with a fresh store
// directory, and shuts it down when t ends.
func Start(t testing.TB) *Server {
	t.Helper()
	s := &Server{t: t, storeDir: t.TempDir(), port: -1}
	t.Cleanup(s.Stop)
	s.Start()
	return s
}

// Start starts the server again after Stop, on the same port and with the
// same store directory, so its streams and durable consumers come back
// with their messages. It does nothing while the server runs.
func (s *Server) Start() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		return
	}
	srv, err := server.NewServer(&server.Options{
		ServerName: "natstest",
		Host:       "127.0.0.1",
		Port:       s.port,
		JetStream:  true,
		StoreDir:   s.storeDir,
		NoLog:      true,
		NoSigs:     true,
	})
	if err != nil {
		s.t.Fatalf("natstest: new server: %v", err)
	}
	srv.Start()
	if !srv.ReadyForConnections(readyTimeout) {
		srv.Shutdown()
		srv.WaitForShutdown()
		s.t.Fatalf("natstest: the server is not ready after %v", readyTimeout)
	}
	if s.port == -1 {
		_, port, err := net.SplitHostPort(srv.Addr().String())
		if err == nil {
			s.port, err = strconv.Atoi(port)
		}
		if err != nil {
			srv.Shutdown()
			srv.WaitForShutdown()
			s.t.Fatalf("natstest: the port of %v: %v", srv.Addr(), err)
		}
	}
	s.srv = srv
}

// Stop shuts the server down and waits until it is gone; its clients see
// their connection closed. It does nothing while the server is stopped.
func (s *Server) Stop() {
	s.mu.Lock()
	srv := s.srv
	s.srv = nil
	s.mu.Unlock()
	if srv != nil {
		srv.Shutdown()
		srv.WaitForShutdown()
	}
}

// URL returns the server's client URL, nats://127.0.0.1:port; it stays the
// same across Stop and Start.
func (s *Server) URL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fmt.Sprintf("nats://127.0.0.1:%d", s.port)
}

// StoreDir returns the directory the server keeps its JetStream store in.
func (s *Server) StoreDir() string { return s.storeDir }
