package testlog

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestBufferConcurrentWrites(t *testing.T) {
	t.Parallel()
	var b Buffer
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() { _, _ = fmt.Fprintf(&b, "line %d\n", i) })
	}
	wg.Wait()
	require.Len(t, b.Lines("line "), 50)
	require.Equal(t, []string{"line 7"}, b.Lines("line 7"))
}
