package natstransport

import (
	"encoding/hex"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"
)

// decodeSubject inverts subjectOf (without the prefix and its dot).
func decodeSubject(s string) (string, bool) {
	parts := strings.Split(s, ".")
	for i, p := range parts {
		if p == "%" {
			parts[i] = ""
			continue
		}
		var b strings.Builder
		for j := 0; j < len(p); j++ {
			if p[j] != '%' {
				if !safeByte(p[j]) {
					return "", false
				}
				b.WriteByte(p[j])
				continue
			}
			if j+2 >= len(p) {
				return "", false
			}
			v, err := hex.DecodeString(p[j+1 : j+3])
			if err != nil || strings.ToUpper(p[j+1:j+3]) != p[j+1:j+3] {
				return "", false
			}
			b.WriteByte(v[0])
			j += 2
		}
		parts[i] = b.String()
	}
	return strings.Join(parts, "."), true
}

func TestSubjectOf(t *testing.T) {
	t.Parallel()
	for topic, want := range map[string]string{
		"command.commands.CreateStaff": "p.command.commands.CreateStaff",
		"reply.node-a":                 "p.reply.node-a",
		"reply.node:1":                 "p.reply.node%3A1",
		"a b":                          "p.a%20b",
		"a..b":                         "p.a.%.b",
		".":                            "p.%.%",
		"*":                            "p.%2A",
		">":                            "p.%3E",
		"%":                            "p.%25",
		"é":                            "p.%C3%A9",
	} {
		require.Equal(t, want, subjectOf("p", topic), topic)
	}
}

func TestConsumerNameOf(t *testing.T) {
	t.Parallel()
	a, b := consumerNameOf("claimbus", "a.b"), consumerNameOf("claimbus", "a_b")
	require.NotEqual(t, a, b, "topics that read alike")
	require.Regexp(t, `^claimbus_a_b_[0-9a-f]{12}$`, a)
	long := consumerNameOf("claimbus", strings.Repeat("é", 500))
	require.LessOrEqual(t, len(long), len("claimbus_")+maxReadableName+1+12)
	require.Equal(t, long, consumerNameOf("claimbus", strings.Repeat("é", 500)), "deterministic")
}

// Every topic has a valid, literal subject that decodes back to it, and a
// consumer name JetStream accepts.
func FuzzSubjectOf(f *testing.F) {
	for _, s := range []string{"command.commands.CreateStaff", "a..b", "", ".", "%41", "a b\t", "é", "$SYS.>", "*"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, topic string) {
		subject := subjectOf("claimbus", topic)
		require.True(t, server.IsValidPublishSubject(subject), "subject %q of %q", subject, topic)
		rest, ok := strings.CutPrefix(subject, "claimbus.")
		require.True(t, ok)
		back, ok := decodeSubject(rest)
		require.True(t, ok, "%q does not decode", subject)
		require.Equal(t, topic, back)
		name := consumerNameOf("claimbus", topic)
		require.NotContains(t, name, ".")
		require.False(t, strings.ContainsAny(name, " \t\r\n\f*>\\/"), name)
		require.True(t, server.IsValidPublishSubject(deliverSubjectOf("CLAIMBUS", name)))
	})
}
