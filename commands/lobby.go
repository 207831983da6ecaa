package commands

// GuessWord is a player's guess of the word in a lobby.
type GuessWord struct {
	LobbyID string `json:"lobby_id"`
	Word    string `json:"word"`
}

// Validate returns a *FieldError for the first invalid field: lobby_id
// present, word of 1 to 64 bytes of letters.
func (c *GuessWord) Validate() error {
	return firstError(checkID("lobby_id", c.LobbyID), checkWord("word", c.Word))
}
