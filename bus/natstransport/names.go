package natstransport

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// maxReadableName bounds the readable part of a consumer name.
const maxReadableName = 96

// safeByte reports whether b may stand for itself in a subject token and
// in a consumer name.
func safeByte(b byte) bool {
	return 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' || b == '_' || b == '-'
}

// subjectOf returns the subject of topic under prefix: prefix, a dot, and
// the topic's dot-separated parts, each with every byte other than a
// letter, a digit, - or _ written as %XX (its value in upper-case hex), and
// an empty part written as a lone %. The mapping is injective (a subject
// decodes back to its topic), so two topics never share a subject, and
// every subject is valid for NATS: no empty token, no white space, no
// wildcard, nothing NATS reserves.
func subjectOf(prefix, topic string) string {
	const hexDigits = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(prefix) + 1 + len(topic) + 8)
	b.WriteString(prefix)
	for part := range strings.SplitSeq(topic, ".") {
		b.WriteByte('.')
		if part == "" {
			b.WriteByte('%')
			continue
		}
		for i := range len(part) {
			c := part[i]
			if safeByte(c) {
				b.WriteByte(c)
				continue
			}
			b.WriteByte('%')
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&0xF])
		}
	}
	return b.String()
}

// consumerNameOf returns the name of topic's durable consumer, which is
// also its queue group: prefix, _, the topic with every byte other than a
// letter, a digit, - or _ written as _ (cut to 96 bytes), _, and the first
// 12 hex digits of the topic's SHA-256, which keep two topics apart that
// read alike ("a.b" and "a_b").
func consumerNameOf(prefix, topic string) string {
	sum := sha256.Sum256([]byte(topic))
	readable := []byte(topic)
	if len(readable) > maxReadableName {
		readable = readable[:maxReadableName]
	}
	for i, c := range readable {
		if !safeByte(c) {
			readable[i] = '_'
		}
	}
	return prefix + "_" + string(readable) + "_" + hex.EncodeToString(sum[:6])
}

// deliverSubjectOf returns the subject the server pushes consumer name's
// messages to, and that every node's subscription of it listens on: an
// inbox subject, outside every stream, fixed by the names so that each
// node creating the consumer asks for the same configuration.
func deliverSubjectOf(stream, name string) string {
	return "_INBOX.claimbus." + stream + "." + name
}

func (t *Transport) subject(topic string) string { return subjectOf(t.cfg.SubjectPrefix, topic) }

func (t *Transport) consumerName(topic string) string {
	return consumerNameOf(t.cfg.DurablePrefix, topic)
}
