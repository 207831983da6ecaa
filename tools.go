//go:build tools

// Package claimbus pins the module versions the packages of this module use
// while they are written; it builds only with the tools tag.
package claimbus

import (
	_ "github.com/ThreeDotsLabs/watermill"
	_ "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	_ "github.com/ThreeDotsLabs/watermill/components/cqrs"
	_ "github.com/ThreeDotsLabs/watermill/components/requestreply"
	_ "github.com/ThreeDotsLabs/watermill/message/router/middleware"
	_ "github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	_ "github.com/google/uuid"
	_ "github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/stretchr/testify/require"
	_ "go.uber.org/goleak"
	_ "modernc.org/sqlite"
)
