package storm

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
)

// plan is what every request of a storm sends, drawn before it starts.
type plan struct {
	seed int64
	// emails are the distinct addresses, normalised (lower case).
	emails []string
	sends  []send
}

// send is one POST /staff.
type send struct {
	target   int // index in the targets
	email    int // index in plan.emails
	spelling string
	staffID  string
	name     string
}

var (
	firstNames = []string{"ann", "bob", "chen", "dara", "eli", "fatima", "goran", "hana", "ivan", "jo", "kofi", "lena", "mateo", "nia", "omar", "priya"}
	lastNames  = []string{"lee", "novak", "okafor", "silva", "tanaka", "weber", "kim", "garcia", "haddad", "ivanova", "jensen", "moreau", "rossi", "singh", "walsh", "young"}
	domains    = []string{"example.org", "example.com", "example.net"}
)

// newPlan draws the plan of a storm of requests over emails addresses and
// targets nodes from seed (0: a seed at random). The addresses, their
// spellings and their order follow from the seed; the staff ids are new
// every time, so that a repeated run does not collide with the last one on
// them.
func newPlan(seed int64, requests, emails, targets int) *plan {
	for seed == 0 {
		seed = rand.Int64()
	}
	rng := rand.New(rand.NewPCG(uint64(seed), 0x5707))
	const tagLetters = "abcdefghijklmnopqrstuvwxyz0123456789"
	var tag [4]byte
	for i := range tag {
		tag[i] = tagLetters[rng.IntN(len(tagLetters))]
	}
	run := strconv.FormatUint(rand.Uint64()>>24, 36)

	p := &plan{seed: seed, emails: make([]string, emails), sends: make([]send, requests)}
	for i := range p.emails {
		p.emails[i] = fmt.Sprintf("%s.%s.%s-%d@%s", firstNames[i%len(firstNames)], lastNames[i/len(firstNames)%len(lastNames)], tag[:], i, domains[i%len(domains)])
	}
	// Every address once, then at random; then all of it in random order.
	order := make([]int, requests)
	for i := range order {
		if i < emails {
			order[i] = i
		} else {
			order[i] = rng.IntN(emails)
		}
	}
	rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	for i, e := range order {
		p.sends[i] = send{
			target:   i % targets,
			email:    e,
			spelling: randomCase(rng, p.emails[e]),
			staffID:  fmt.Sprintf("storm-%s-%d", run, i),
			name:     displayName(e),
		}
	}
	return p
}

// randomCase spells s with each ASCII letter in upper or lower case at
// random: "Ann.LeE@examPLE.org".
func randomCase(rng *rand.Rand, s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'a' && c <= 'z' && rng.IntN(2) == 0 {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}

// displayName is the name of the member the i-th address belongs to.
func displayName(i int) string {
	first, last := firstNames[i%len(firstNames)], lastNames[i/len(firstNames)%len(lastNames)]
	return strings.ToUpper(first[:1]) + first[1:] + " " + strings.ToUpper(last[:1]) + last[1:]
}
