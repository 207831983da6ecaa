package commands_test

import (
	"net/mail"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/claimbus/claimbus/commands"
)

// The limits the package documents (doc.go), in bytes.
const (
	maxIDLen     = 128
	maxEmailLen  = 254
	maxNameLen   = 200
	maxReasonLen = 500
	maxWordLen   = 64
)

// validator is what every command implements.
type validator interface{ Validate() error }

func TestValidate(t *testing.T) {
	t.Parallel()
	long := func(n int) string { return strings.Repeat("a", n) }
	staff := func(mod func(*commands.CreateStaff)) *commands.CreateStaff {
		c := &commands.CreateStaff{StaffID: "s-1", Email: "ann@x.org", Name: "Ann Lee"}
		mod(c)
		return c
	}
	open := func(mod func(*commands.OpenTransfer)) *commands.OpenTransfer {
		c := &commands.OpenTransfer{TransferID: "t-1", FromWalletID: "w-1", ToWalletID: "w-2", Amount: 1250, Currency: "EUR"}
		mod(c)
		return c
	}
	keep := func(*commands.CreateStaff) {}
	tests := []struct {
		name  string
		cmd   validator
		field string // "" when valid
	}{
		{"staff valid", staff(keep), ""},
		{"staff mixed case and spaces", staff(func(c *commands.CreateStaff) { c.Email = "  Ann.Lee+ops@X.Org " }), ""},
		{"staff name of the limit", staff(func(c *commands.CreateStaff) { c.Name = long(maxNameLen) }), ""},
		{"staff unicode name", staff(func(c *commands.CreateStaff) { c.Name = "Zoë Ñúñez" }), ""},
		{"staff no id", staff(func(c *commands.CreateStaff) { c.StaffID = "" }), "staff_id"},
		{"staff blank id", staff(func(c *commands.CreateStaff) { c.StaffID = "  " }), "staff_id"},
		{"staff id with space", staff(func(c *commands.CreateStaff) { c.StaffID = "s 1" }), "staff_id"},
		{"staff id with a slash", staff(func(c *commands.CreateStaff) { c.StaffID = "s/1" }), "staff_id"},
		{"staff id with NUL", staff(func(c *commands.CreateStaff) { c.StaffID = "s\x001" }), "staff_id"},
		{"staff id not UTF-8", staff(func(c *commands.CreateStaff) { c.StaffID = "s\xff" }), "staff_id"},
		{"staff name with NUL", staff(func(c *commands.CreateStaff) { c.Name = "Ann\x00" }), "name"},
		{"staff id too long", staff(func(c *commands.CreateStaff) { c.StaffID = long(maxIDLen + 1) }), "staff_id"},
		{"staff no email", staff(func(c *commands.CreateStaff) { c.Email = "" }), "email"},
		{"staff email without @", staff(func(c *commands.CreateStaff) { c.Email = "ann.x.org" }), "email"},
		{"staff email without domain", staff(func(c *commands.CreateStaff) { c.Email = "ann@" }), "email"},
		{"staff email without local part", staff(func(c *commands.CreateStaff) { c.Email = "@x.org" }), "email"},
		{"staff display name", staff(func(c *commands.CreateStaff) { c.Email = "Ann <ann@x.org>" }), "email"},
		{"staff angle brackets", staff(func(c *commands.CreateStaff) { c.Email = "<ann@x.org>" }), "email"},
		{"staff two addresses", staff(func(c *commands.CreateStaff) { c.Email = "ann@x.org, bob@x.org" }), "email"},
		{"staff comment", staff(func(c *commands.CreateStaff) { c.Email = "ann@x.org (Ann)" }), "email"},
		{"staff space inside", staff(func(c *commands.CreateStaff) { c.Email = "ann lee@x.org" }), "email"},
		{"staff email too long", staff(func(c *commands.CreateStaff) { c.Email = long(64) + "@" + long(190) + ".org" }), "email"},
		{"staff email invalid utf8", staff(func(c *commands.CreateStaff) { c.Email = "ann\xff@x.org" }), "email"},
		{"staff no name", staff(func(c *commands.CreateStaff) { c.Name = " " }), "name"},
		{"staff name too long", staff(func(c *commands.CreateStaff) { c.Name = long(maxNameLen + 1) }), "name"},
		{"staff name with newline", staff(func(c *commands.CreateStaff) { c.Name = "Ann\nLee" }), "name"},
		{"staff first bad field wins", staff(func(c *commands.CreateStaff) { c.StaffID, c.Email = "", "bad" }), "staff_id"},

		{"open valid", open(func(*commands.OpenTransfer) {}), ""},
		{"open max amount", open(func(c *commands.OpenTransfer) { c.Amount = commands.MaxAmount }), ""},
		{"open no transfer id", open(func(c *commands.OpenTransfer) { c.TransferID = "" }), "transfer_id"},
		{"open no from", open(func(c *commands.OpenTransfer) { c.FromWalletID = "" }), "from_wallet_id"},
		{"open no to", open(func(c *commands.OpenTransfer) { c.ToWalletID = "" }), "to_wallet_id"},
		{"open same wallet", open(func(c *commands.OpenTransfer) { c.ToWalletID = c.FromWalletID }), "to_wallet_id"},
		{"open zero amount", open(func(c *commands.OpenTransfer) { c.Amount = 0 }), "amount"},
		{"open negative amount", open(func(c *commands.OpenTransfer) { c.Amount = -5 }), "amount"},
		{"open amount over limit", open(func(c *commands.OpenTransfer) { c.Amount = commands.MaxAmount + 1 }), "amount"},
		{"open no currency", open(func(c *commands.OpenTransfer) { c.Currency = "" }), "currency"},
		{"open lower-case currency", open(func(c *commands.OpenTransfer) { c.Currency = "eur" }), "currency"},
		{"open currency not ISO 4217", open(func(c *commands.OpenTransfer) { c.Currency = "ABC" }), "currency"},
		{"open currency a fund code", open(func(c *commands.OpenTransfer) { c.Currency = "XAU" }), "currency"},
		{"open currency NUL", open(func(c *commands.OpenTransfer) { c.Currency = "EU\x00" }), "currency"},
		{"open currency yen", open(func(c *commands.OpenTransfer) { c.Currency = "JPY" }), ""},
		{"open currency Caribbean guilder", open(func(c *commands.OpenTransfer) { c.Currency = "XCG" }), ""},
		{"open wallet id with a slash", open(func(c *commands.OpenTransfer) { c.FromWalletID = "w/1" }), "from_wallet_id"},
		{"open long currency", open(func(c *commands.OpenTransfer) { c.Currency = "EURO" }), "currency"},

		{"approve valid", &commands.ApproveTransfer{TransferID: "t-1"}, ""},
		{"approve no id", &commands.ApproveTransfer{}, "transfer_id"},
		{"cancel valid", &commands.CancelTransfer{TransferID: "t-1"}, ""},
		{"cancel with reason", &commands.CancelTransfer{TransferID: "t-1", Reason: "asked by the customer"}, ""},
		{"cancel no id", &commands.CancelTransfer{Reason: "x"}, "transfer_id"},
		{"cancel reason too long", &commands.CancelTransfer{TransferID: "t-1", Reason: long(maxReasonLen + 1)}, "reason"},

		{"guess valid", &commands.GuessWord{LobbyID: "l-1", Word: "Éclair"}, ""},
		{"guess no lobby", &commands.GuessWord{Word: "apple"}, "lobby_id"},
		{"guess no word", &commands.GuessWord{LobbyID: "l-1"}, "word"},
		{"guess two words", &commands.GuessWord{LobbyID: "l-1", Word: "apple pie"}, "word"},
		{"guess digits", &commands.GuessWord{LobbyID: "l-1", Word: "r2d2"}, "word"},
		{"guess lobby id with a slash", &commands.GuessWord{LobbyID: "l/1", Word: "apple"}, "lobby_id"},
		{"guess NUL in word", &commands.GuessWord{LobbyID: "l-1", Word: "ap\x00ple"}, "word"},
		{"cancel NUL in reason", &commands.CancelTransfer{TransferID: "t-1", Reason: "no\x00"}, "reason"},
		{"guess too long", &commands.GuessWord{LobbyID: "l-1", Word: long(maxWordLen + 1)}, "word"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.cmd.Validate()
			if tt.field == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			var fe *commands.FieldError
			require.ErrorAs(t, err, &fe)
			require.Equal(t, tt.field, fe.Field())
			var named interface{ Field() string }
			require.ErrorAs(t, err, &named, "the error names its field through a Field method")
			require.Equal(t, "commands: invalid "+tt.field+": "+fe.Reason, err.Error())
		})
	}
}

func TestFieldErrorNeverQuotesTheValue(t *testing.T) {
	t.Parallel()
	secret := "someone.private@example.org"
	err := (&commands.CreateStaff{StaffID: "s-1", Email: "Someone <" + secret + ">", Name: "x"}).Validate()
	require.Error(t, err)
	require.NotContains(t, err.Error(), secret)
}

func FuzzCheckEmail(f *testing.F) {
	for _, s := range []string{
		"ann@x.org", " Ann@X.ORG ", "a@b", "Ann <ann@x.org>", "<a@b>", "a@b, c@d", `"a b"@x.org`,
		"a@[127.0.0.1]", "ann@x.org (c)", "", "@", "a@", "@b", "ünï@cödé.org", "a\x00@b", "a@b\r\n",
		"=?utf-8?q?Ann?= <a@b>", "a.@b", ".a@b", "a..b@c", "İSTANBUL@X.ORG",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		err := commands.CheckEmail("email", s)
		if err != nil {
			var fe *commands.FieldError
			require.ErrorAs(t, err, &fe)
			require.Equal(t, "email", fe.Field())
			return
		}
		trimmed := strings.TrimSpace(s)
		require.NotEmpty(t, trimmed)
		require.LessOrEqual(t, len(trimmed), maxEmailLen)
		addr, perr := mail.ParseAddress(trimmed)
		require.NoError(t, perr)
		require.Empty(t, addr.Name)
		require.Equal(t, trimmed, addr.Address, "an accepted address is bare")
		at := strings.LastIndexByte(trimmed, '@')
		require.Positive(t, at)
		require.Less(t, at, len(trimmed)-1)
		require.NoError(t, commands.CheckEmail("email", trimmed), "trimming keeps an address valid")
	})
}

// The one-value checks hold a value to the rule of the commands' fields,
// and report a *FieldError naming the field given.
func TestChecks(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		check func(field, v string) error
		value string
		ok    bool
	}{
		{"id", commands.CheckID, "w-1", true},
		{"id unicode", commands.CheckID, "wallet-é", true},
		{"id empty", commands.CheckID, "", false},
		{"id NUL", commands.CheckID, "w\x00", false},
		{"id escape", commands.CheckID, "w\x1b[0m", false},
		{"id not UTF-8", commands.CheckID, "w\xff", false},
		{"id slash", commands.CheckID, "a/b", false},
		{"id space", commands.CheckID, "a b", false},
		{"id no-break space", commands.CheckID, "a\u00a0b", false},
		{"id too long", commands.CheckID, strings.Repeat("x", maxIDLen+1), false},
		{"currency", commands.CheckCurrency, "EUR", true},
		{"currency lower case", commands.CheckCurrency, "eur", false},
		{"currency unknown", commands.CheckCurrency, "ABC", false},
		{"currency withdrawn", commands.CheckCurrency, "HRK", false},
		{"currency test code", commands.CheckCurrency, "XTS", false},
		{"currency NUL", commands.CheckCurrency, "\x00EU", false},
		{"word", commands.CheckWord, " Éclair ", true},
		{"word digit", commands.CheckWord, "r2d2", false},
		{"word NUL", commands.CheckWord, "ap\x00ple", false},
		{"word blank", commands.CheckWord, " ", false},
	}
	for _, tt := range tests {
		err := tt.check("f", tt.value)
		if tt.ok {
			require.NoError(t, err, tt.name)
			continue
		}
		var fe *commands.FieldError
		require.ErrorAs(t, err, &fe, tt.name)
		require.Equal(t, "f", fe.Field(), tt.name)
	}
	require.NoError(t, commands.CheckID("f", "x"), "a valid value is a nil error, not a typed nil")
	for _, c := range []string{"EUR", "USD", "JPY", "GBP", "CHF", "XCG", "ZWG", "SLE", "VES"} {
		require.NoError(t, commands.CheckCurrency("currency", c), c)
	}
	for _, c := range []string{"", "eur", "EURO", "XXX", "XAU", "BOV", "ANG", "BGN", "CUC", "SLL", "ZWL"} {
		require.Error(t, commands.CheckCurrency("currency", c), c)
	}
}
