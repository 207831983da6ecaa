package uniqueness

import "github.com/claimbus/claimbus/middleware"

// HeldClaims returns the claims the middleware holds for the command p
// carries, for the tests of package uniqueness_test.
func HeldClaims(p *middleware.Pipeline) []*hold { return claimsOf(p) }
