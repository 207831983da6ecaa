package storm

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Bad fields are all reported at once, each named by its flag.
func TestConfigValidate(t *testing.T) {
	t.Parallel()
	valid := testConfig("http://127.0.0.1:8080", "http://127.0.0.1:8081/")
	require.NoError(t, valid.Validate())

	tests := []struct {
		name string
		mod  func(*Config)
		want []string
	}{
		{"no target", func(c *Config) { c.Targets = nil }, []string{"-target is required"}},
		{"not a URL", func(c *Config) { c.Targets = []string{"a b:8080"} }, []string{`-target "a b:8080": want host:port, or an http:// or https:// URL`}},
		{"not a port", func(c *Config) { c.Targets = []string{"127.0.0.1:port"} }, []string{`-target "127.0.0.1:port": want host:port`, `invalid port ":port"`}},
		{"host:port twice", func(c *Config) { c.Targets = []string{"127.0.0.1:8080", "http://127.0.0.1:8080"} }, []string{"given twice"}},
		{"ftp", func(c *Config) { c.Targets = []string{"ftp://127.0.0.1"} }, []string{"or an http:// or https:// URL"}},
		{"no host", func(c *Config) { c.Targets = []string{"http://"} }, []string{"no host"}},
		{"user", func(c *Config) { c.Targets = []string{"http://u:p@127.0.0.1:8080"} }, []string{"user name"}},
		{"query", func(c *Config) { c.Targets = []string{"http://127.0.0.1:8080/?x=1"} }, []string{"without a query"}},
		{"twice", func(c *Config) { c.Targets = []string{"http://127.0.0.1:8080", "http://127.0.0.1:8080/"} }, []string{"given twice"}},
		{"requests 0", func(c *Config) { c.Requests = 0 }, []string{"-requests 0: give 1 to 1000000"}},
		{"requests too many", func(c *Config) { c.Requests = MaxRequests + 1 }, []string{"-requests 1000001"}},
		{"emails 0", func(c *Config) { c.Emails = 0 }, []string{"-emails 0: give at least 1"}},
		{"emails over requests", func(c *Config) { c.Emails = 101 }, []string{"-emails 101 is more than -requests 100"}},
		{"concurrency", func(c *Config) { c.Concurrency = -1 }, []string{"-concurrency -1"}},
		{"concurrency too high", func(c *Config) { c.Concurrency = MaxConcurrency + 1 }, []string{"-concurrency 1025: give 1 to 1024"}},
		{"timeout", func(c *Config) { c.Timeout = 0 }, []string{"-timeout 0s"}},
		{"timeout too long", func(c *Config) { c.Timeout = time.Hour }, []string{"-timeout 1h0m0s"}},
		{"progress", func(c *Config) { c.Progress = "loud" }, []string{`-progress "loud": want auto, bar, lines or off`}},
		{"everything at once", func(c *Config) { *c = Config{Progress: "x"} }, []string{"-target", "-requests", "-emails", "-concurrency", "-timeout", "-progress"}},
	}
	for _, tt := range tests {
		c := valid
		tt.mod(&c)
		err := c.Validate()
		require.Error(t, err, tt.name)
		for _, w := range tt.want {
			require.Contains(t, err.Error(), w, tt.name)
		}
	}

	for in, want := range map[string]string{
		" http://127.0.0.1:8080/ ": "http://127.0.0.1:8080", //nolint:gocritic // mapKey: the spaces around it are what is tested
		"https://node-a:8443":      "https://node-a:8443",
		"127.0.0.1:8080":           "http://127.0.0.1:8080",
		"localhost:8080/":          "http://localhost:8080",
		"[::1]:8080":               "http://[::1]:8080",
		"node-a":                   "http://node-a",
	} {
		base, err := parseTarget(in)
		require.NoError(t, err, in)
		require.Equal(t, want, base, in)
	}
}
