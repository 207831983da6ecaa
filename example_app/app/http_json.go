package app

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// maxBody bounds a request body.
const maxBody = 64 << 10

// decodeBody reads r's body into v, a pointer to one of the routes' body
// structs, strictly: the body is exactly one JSON object, in valid UTF-8
// (no \u escape of half a surrogate pair either), whose keys are the
// json names of v's fields, exactly (encoding/json would match them
// case-insensitively), each at most once, with values of the field's JSON
// type (null is none); a missing key leaves its field zero. With
// allowEmpty, for a route whose body is optional, no body (empty, or
// null, as a JSON client may send "nothing") is an empty object. Otherwise
// it answers 400
// bad_request, or 413 too_large for a body over maxBody, with a message of
// its own (never encoding/json's, which names Go types), and returns
// false.
func decodeBody(w http.ResponseWriter, r *http.Request, v any, allowEmpty bool) bool {
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		writeError(w, http.StatusRequestEntityTooLarge, CodeTooLarge, "", fmt.Sprintf("the body is over %d bytes", maxBody))
		return false
	case err != nil:
		writeError(w, http.StatusBadRequest, CodeBadRequest, "", "the body could not be read")
		return false
	case allowEmpty && (len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null"):
		return true
	}
	if err := decodeStrict(raw, v); err != nil {
		var be *bodyError
		field := ""
		if errors.As(err, &be) {
			field = be.field
		}
		writeError(w, http.StatusBadRequest, CodeBadRequest, field, err.Error())
		return false
	}
	return true
}

// bodyError is why a body is refused, in words for its sender; field names
// the key at fault, if one is.
type bodyError struct {
	field string
	msg   string
}

func (e *bodyError) Error() string { return e.msg }

func badBody(field, format string, args ...any) error {
	return &bodyError{field: field, msg: fmt.Sprintf(format, args...)}
}

// decodeStrict decodes raw into v as decodeBody describes.
func decodeStrict(raw []byte, v any) error {
	if !utf8.Valid(raw) {
		return badBody("", "the body is not valid UTF-8")
	}
	if loneSurrogate(raw) {
		return badBody("", "the body holds a \\u escape of half a UTF-16 surrogate pair, which is no character")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return syntaxError(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return badBody("", "the body must be one JSON object, not %s", jsonKind(tok))
	}
	dst := reflect.ValueOf(v).Elem()
	fields := fieldsOf(dst.Type())
	seen := make(map[string]bool, len(fields.byName))
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return syntaxError(err)
		}
		key, _ := tok.(string)
		f, ok := fields.byName[key]
		if !ok {
			return badBody("", "unknown field: the fields are %s (names are case-sensitive)", fields.list)
		}
		if seen[key] {
			return badBody(key, "field %q is given twice", key)
		}
		seen[key] = true
		var val json.RawMessage
		if err := dec.Decode(&val); err != nil {
			return syntaxError(err)
		}
		if err := setField(dst.Field(f.index), key, val); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return syntaxError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return badBody("", "the body must be one JSON object, with nothing after it")
	}
	return nil
}

// setField decodes val, the value of key, into the field f.
func setField(f reflect.Value, key string, val json.RawMessage) error {
	switch f.Kind() {
	case reflect.String:
		var s string
		if val[0] != '"' || json.Unmarshal(val, &s) != nil {
			return badBody(key, "field %q must be a string", key)
		}
		f.SetString(s)
	case reflect.Int64:
		n, err := strconv.ParseInt(string(val), 10, 64)
		if err != nil {
			return badBody(key, "field %q must be a whole number, in minor units such as cents", key)
		}
		f.SetInt(n)
	case reflect.Slice: // of strings
		var items []json.RawMessage
		if val[0] != '[' || json.Unmarshal(val, &items) != nil {
			return badBody(key, "field %q must be an array of strings", key)
		}
		out := make([]string, len(items))
		for i, item := range items {
			if item[0] != '"' || json.Unmarshal(item, &out[i]) != nil {
				return badBody(key, "field %q must be an array of strings", key)
			}
		}
		f.Set(reflect.ValueOf(out))
	default:
		panic(fmt.Sprintf("app: a body field of kind %v", f.Kind()))
	}
	return nil
}

// syntaxError is the refusal of a body that is not JSON.
func syntaxError(err error) error {
	var se *json.SyntaxError
	switch {
	case errors.As(err, &se):
		return badBody("", "the body is not valid JSON (at byte %d)", se.Offset)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return badBody("", "the body must be one JSON object: it is empty or ends early")
	}
	return badBody("", "the body is not valid JSON")
}

// jsonKind names the JSON value tok begins.
func jsonKind(tok json.Token) string {
	switch t := tok.(type) {
	case json.Delim:
		if t == '[' {
			return "an array"
		}
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	case nil:
		return "null"
	}
	return "that"
}

// bodyFields are the keys of a body struct.
type bodyFields struct {
	byName map[string]struct{ index int }
	list   string // the names, quoted, for messages
}

var bodyFieldsCache sync.Map // reflect.Type → *bodyFields

// fieldsOf returns the keys of the body struct t: the json names of its
// fields.
func fieldsOf(t reflect.Type) *bodyFields {
	if f, ok := bodyFieldsCache.Load(t); ok {
		return f.(*bodyFields)
	}
	f := &bodyFields{byName: make(map[string]struct{ index int }, t.NumField())}
	var names []string
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		f.byName[name] = struct{ index int }{i}
		names = append(names, strconv.Quote(name))
	}
	f.list = strings.Join(names, ", ")
	bodyFieldsCache.Store(t, f)
	return f
}

// loneSurrogate reports whether a JSON string in raw holds a \u escape of
// a UTF-16 surrogate that is not half of a pair, which encoding/json would
// turn into U+FFFD. raw need not be valid JSON.
func loneSurrogate(raw []byte) bool {
	inString := false
	for i := 0; i < len(raw); i++ {
		switch c := raw[i]; {
		case c == '"':
			inString = !inString
		case c == '\\' && inString:
			if i+1 < len(raw) && raw[i+1] == 'u' {
				r, ok := hex4(raw, i+2)
				switch {
				case !ok:
				case r >= 0xDC00 && r <= 0xDFFF:
					return true
				case r >= 0xD800 && r <= 0xDBFF:
					if i+7 >= len(raw) || raw[i+6] != '\\' || raw[i+7] != 'u' {
						return true
					}
					if lo, ok := hex4(raw, i+8); !ok || lo < 0xDC00 || lo > 0xDFFF {
						return true
					}
					i += 6 // the low half, checked here
				}
			}
			i++ // the escaped character
		}
	}
	return false
}

// hex4 reads the four hex digits at raw[i:].
func hex4(raw []byte, i int) (rune, bool) {
	if i+4 > len(raw) {
		return 0, false
	}
	n, err := strconv.ParseUint(string(raw[i:i+4]), 16, 16)
	return rune(n), err == nil
}
