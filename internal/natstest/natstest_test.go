package natstest_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/claimbus/claimbus/internal/natstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A stream created before a restart is there after it, with its message,
// at the same URL.
func TestRestartKeepsPortAndStore(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	url := srv.URL()

	nc, err := nats.Connect(url)
	require.NoError(t, err)
	js, err := nc.JetStream()
	require.NoError(t, err)
	_, err = js.AddStream(&nats.StreamConfig{Name: "S", Subjects: []string{"s.>"}, Storage: nats.FileStorage})
	require.NoError(t, err)
	_, err = js.Publish("s.x", []byte("kept"))
	require.NoError(t, err)
	nc.Close()

	srv.Stop()
	_, err = nats.Connect(url, nats.Timeout(time.Second))
	require.Error(t, err, "the server is down")
	srv.Start()
	require.Equal(t, url, srv.URL())

	nc, err = nats.Connect(url)
	require.NoError(t, err)
	defer nc.Close()
	js, err = nc.JetStream()
	require.NoError(t, err)
	m, err := js.GetLastMsg("S", "s.x")
	require.NoError(t, err)
	require.Equal(t, "kept", string(m.Data))
}
