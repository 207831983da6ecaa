package claimstore_test

import (
	"testing"

	"github.com/claimbus/claimbus/claimstore"
	"github.com/claimbus/claimbus/claimstore/claimstoretest"
)

func TestMemoryConformance(t *testing.T) {
	t.Parallel()
	claimstoretest.Run(t, func(*testing.T) claimstore.Store { return claimstore.NewMemory(claimstore.MemoryConfig{}) })
}
