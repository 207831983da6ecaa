package storm

import (
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func testConfig(targets ...string) Config {
	return Config{Targets: targets, Requests: 100, Emails: 10, Concurrency: 8, Timeout: 10 * time.Second, Seed: 1}
}
