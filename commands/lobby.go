package commands

import (
	"strings"
	"unicode"
)

// GuessWord is a player's guess of the word in a lobby.
type GuessWord struct {
	LobbyID string `json:"lobby_id"`
	Word    string `json:"word"`
}

// Validate returns a *FieldError for the first invalid field: lobby_id
// present, word of 1 to MaxWordLen bytes of letters.
func (c *GuessWord) Validate() error {
	var word *FieldError
	if word = checkText("word", c.Word, MaxWordLen, true); word == nil &&
		strings.IndexFunc(strings.TrimSpace(c.Word), func(r rune) bool { return !unicode.IsLetter(r) }) >= 0 {
		word = fieldErr("word", "must be letters only")
	}
	return firstError(checkID("lobby_id", c.LobbyID), word)
}
