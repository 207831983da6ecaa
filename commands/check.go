package commands

import (
	"fmt"
	"net/mail"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Limits on the fields of commands, in bytes of UTF-8 after trimming
// surrounding white space (see the package documentation).
const (
	maxIDLen     = 128
	maxEmailLen  = 254
	maxNameLen   = 200
	maxReasonLen = 500
	maxWordLen   = 64
	// maxIdempotencyKeyLen is the longest idempotency key: 1 to 128
	// bytes.
	maxIdempotencyKeyLen = 128
	// MaxAmount is the largest amount of one transfer, in minor units:
	// 10^15, so that sums of many amounts stay far from overflowing int64.
	MaxAmount int64 = 1_000_000_000_000_000
)

// fieldErr returns a *FieldError for field with a formatted reason.
func fieldErr(field, format string, args ...any) *FieldError {
	return &FieldError{Name: field, Reason: fmt.Sprintf(format, args...)}
}

// checkText checks a free text of at most limit bytes: valid UTF-8 and no
// control characters; required says whether it may be blank.
func checkText(field, s string, limit int, required bool) *FieldError {
	s = strings.TrimSpace(s)
	switch {
	case s == "" && required:
		return fieldErr(field, "is required")
	case len(s) > limit:
		return fieldErr(field, "is %d bytes long, the limit is %d", len(s), limit)
	case !utf8.ValidString(s):
		return fieldErr(field, "is not valid UTF-8")
	case strings.IndexFunc(s, unicode.IsControl) >= 0:
		return fieldErr(field, "contains a control character")
	}
	return nil
}

// CheckID reports, as a *FieldError for field, a value that is not an id
// as every command takes them: 1 to 128 bytes of UTF-8, without white
// space, control characters or "/" (an id is one segment of a URL path,
// such as /wallets/{id}). The HTTP API checks the ids of set-up data and
// of paths with it, so that they are held to the commands' rule.
func CheckID(field, id string) error {
	if err := checkID(field, id); err != nil {
		return err
	}
	return nil
}

func checkID(field, id string) *FieldError {
	if err := checkText(field, id, maxIDLen, true); err != nil {
		return err
	}
	switch {
	case strings.IndexFunc(id, unicode.IsSpace) >= 0:
		return fieldErr(field, "contains white space")
	case strings.ContainsRune(id, '/'):
		return fieldErr(field, "contains a /")
	}
	return nil
}

// CheckWord reports, as a *FieldError for field, a value that is not a
// word of the lobby game: 1 to 64 bytes of letters (surrounding
// white space is ignored).
func CheckWord(field, word string) error {
	if err := checkWord(field, word); err != nil {
		return err
	}
	return nil
}

func checkWord(field, word string) *FieldError {
	if err := checkText(field, word, maxWordLen, true); err != nil {
		return err
	}
	if strings.IndexFunc(strings.TrimSpace(word), func(r rune) bool { return !unicode.IsLetter(r) }) >= 0 {
		return fieldErr(field, "must be letters only")
	}
	return nil
}

// CheckEmail reports, as a *FieldError for field, an email address that is
// not one bare address (local@domain, as net/mail parses it, with no
// display name, angle brackets or comments) of at most 254 bytes.
// Surrounding white space is allowed and ignored.
func CheckEmail(field, email string) error {
	if err := checkEmail(field, email); err != nil {
		return err
	}
	return nil
}

func checkEmail(field, email string) *FieldError {
	s := strings.TrimSpace(email)
	switch {
	case s == "":
		return fieldErr(field, "is required")
	case len(s) > maxEmailLen:
		return fieldErr(field, "is %d bytes long, the limit is %d", len(s), maxEmailLen)
	case !utf8.ValidString(s):
		return fieldErr(field, "is not valid UTF-8")
	}
	addr, err := mail.ParseAddress(s)
	switch {
	case err != nil:
		return fieldErr(field, "is not an email address")
	case addr.Name != "":
		return fieldErr(field, "has a display name: give the bare address")
	case addr.Address != s:
		return fieldErr(field, "is not a bare address (no angle brackets, quotes or comments)")
	}
	at := strings.LastIndexByte(s, '@')
	if at <= 0 || at == len(s)-1 {
		return fieldErr(field, "is not an email address")
	}
	return nil
}

// firstError returns the first non-nil error, as an error that is nil
// when all are.
func firstError(errs ...*FieldError) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// CheckIdempotencyKey reports, as a *FieldError for field, an idempotency
// key that is set and is not 1 to 128 bytes of printable
// ASCII without spaces (what an HTTP header carries safely, such as a
// UUID). An empty key is none, and passes.
func CheckIdempotencyKey(field, key string) error {
	if err := checkIdempotencyKey(field, key); err != nil {
		return err
	}
	return nil
}

func checkIdempotencyKey(field, key string) *FieldError {
	if len(key) > maxIdempotencyKeyLen {
		return fieldErr(field, "is %d bytes long, the limit is %d", len(key), maxIdempotencyKeyLen)
	}
	for i := 0; i < len(key); i++ {
		if key[i] <= ' ' || key[i] > '~' {
			return fieldErr(field, "holds a character other than printable ASCII (a space, a control character or a non-ASCII byte)")
		}
	}
	return nil
}
