package app

import (
	"context"
	"database/sql"
	"errors"
	"strings"

	"github.com/claimbus/claimbus/commands"
	"github.com/claimbus/claimbus/lockstore"
	"github.com/claimbus/claimbus/middleware"
)

// Lobby is a word-guessing game: players guess its hidden words, and the
// first correct guess of each word wins it.
type Lobby struct {
	LobbyID   string `json:"lobby_id"`
	Words     int    `json:"words"`
	WordsLeft int    `json:"words_left"`
}

// Guess is the outcome of one GuessWord.
type Guess struct {
	LobbyID string `json:"lobby_id"`
	Word    string `json:"word"`
	// Correct says whether the word is one of the lobby's.
	Correct bool `json:"correct"`
	// Won says whether this guess was the first correct one of the word.
	Won bool `json:"won"`
	// WordsLeft is how many words of the lobby nobody has found yet.
	WordsLeft int `json:"words_left"`
}

// normalizeWord is the form words are stored and compared in.
func normalizeWord(w string) string { return strings.ToLower(strings.TrimSpace(w)) }

// maxLobbyWords bounds the words of one lobby.
const maxLobbyWords = 100

// AddLobby creates a lobby hiding words. It is set-up, not a command: it
// writes directly, after the checks GuessWord makes of the same fields
// (commands.CheckID, commands.CheckWord).
func (n *Node) AddLobby(ctx context.Context, id string, words []string) error {
	if err := commands.CheckID("lobby_id", id); err != nil {
		return invalid(err)
	}
	if len(words) == 0 || len(words) > maxLobbyWords {
		return middleware.Reject(middleware.CodeInvalid, "words", "invalid words: a lobby hides 1 to %d words", maxLobbyWords)
	}
	seen := make(map[string]bool, len(words))
	for _, w := range words {
		if err := commands.CheckWord("words", w); err != nil {
			return invalid(err)
		}
		w = normalizeWord(w)
		if seen[w] {
			return middleware.Reject(middleware.CodeInvalid, "words", "invalid words: a word is given twice")
		}
		seen[w] = true
	}
	return n.tx(ctx, func(ctx context.Context, q querier) error {
		added, err := q.exec(ctx, `INSERT INTO lobby (lobby_id, words_left) VALUES ($1, $2) ON CONFLICT (lobby_id) DO NOTHING`, id, len(seen))
		if err != nil {
			return err
		}
		if added == 0 {
			return middleware.Reject(middleware.CodeAlreadyTaken, "lobby_id", "a lobby has this id")
		}
		for w := range seen {
			if _, err := q.exec(ctx, `INSERT INTO lobby_word (lobby_id, word) VALUES ($1, $2)`, id, w); err != nil {
				return err
			}
		}
		return nil
	})
}

// Lobby returns a lobby, or an error matching ErrNotFound.
func (n *Node) Lobby(ctx context.Context, id string) (Lobby, error) {
	l := Lobby{LobbyID: id}
	err := n.db().queryRow(ctx,
		`SELECT words_left, (SELECT count(*) FROM lobby_word WHERE lobby_id = $1) FROM lobby WHERE lobby_id = $1`, id).
		Scan(&l.WordsLeft, &l.Words)
	if errors.Is(err, sql.ErrNoRows) {
		return Lobby{}, middleware.Reject(CodeNotFound, "lobby_id", "no such lobby")
	}
	return l, err
}

// guessWord handles GuessWord. The read-modify-write of the lobby (is the
// word hidden here, was it found, record the win, count down) runs in
// Serialize on the lobby: one guess at a time per lobby on every node,
// so each word has exactly one winner.
func (n *Node) guessWord(ctx context.Context, c *commands.GuessWord) (Guess, error) {
	g := Guess{LobbyID: c.LobbyID, Word: normalizeWord(c.Word)}
	id := commandID(ctx)
	err := n.serialize(ctx, lockstore.Key{Namespace: NamespaceLobby, ID: c.LobbyID}, func(ctx context.Context, q querier) error {
		g.Correct, g.Won = false, false
		err := q.queryRow(ctx, `SELECT words_left FROM lobby WHERE lobby_id = $1`, g.LobbyID).Scan(&g.WordsLeft)
		if errors.Is(err, sql.ErrNoRows) {
			return middleware.Reject(CodeNotFound, "lobby_id", "no such lobby")
		}
		if err != nil {
			return err
		}
		var hidden, found int
		err = q.queryRow(ctx, `SELECT
	(SELECT count(*) FROM lobby_word WHERE lobby_id = $1 AND word = $2),
	(SELECT count(*) FROM lobby_win WHERE lobby_id = $1 AND word = $2)`, g.LobbyID, g.Word).Scan(&hidden, &found)
		if err != nil || hidden == 0 || found > 0 {
			g.Correct = hidden > 0
			return err
		}
		g.Correct = true
		if _, err := q.exec(ctx, `INSERT INTO lobby_win (lobby_id, word, command_id) VALUES ($1, $2, $3)`, g.LobbyID, g.Word, id); err != nil {
			return err
		}
		if _, err := q.exec(ctx, `UPDATE lobby SET words_left = words_left - 1 WHERE lobby_id = $1`, g.LobbyID); err != nil {
			return err
		}
		g.Won, g.WordsLeft = true, g.WordsLeft-1
		return nil
	})
	if n.backend.isUniqueViolation(err) {
		// The primary key of lobby_win fired: something bypassed Serialize.
		// The word was won by someone else (how many are left is unknown
		// here, so WordsLeft stays 0).
		n.backstop(ctx, "lobby.win", err)
		return Guess{LobbyID: g.LobbyID, Word: g.Word, Correct: true}, nil
	}
	if err != nil {
		return Guess{}, err
	}
	return g, nil
}
