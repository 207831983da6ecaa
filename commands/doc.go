// Package commands holds the commands of the example domain: staff
// (CreateStaff), wallet transfers (OpenTransfer, ApproveTransfer,
// CancelTransfer) and the word-guessing lobby (GuessWord).
//
// Each command has a Validate method that checks what can be checked
// without a database: ids present, an email address that is one bare
// address, sizes within the limits below, a positive amount. Validate
// returns nil or a *FieldError naming the first field, in the order the
// struct declares them, that fails; its Field method gives the field's
// JSON name, so a validation middleware can answer
// {"code":"invalid","field":"email"} without knowing the command.
//
// # Limits
//
// Sizes are in bytes of UTF-8 and apply after surrounding white space is
// trimmed:
//
//   - ids (StaffID, TransferID, wallet and lobby ids): 1 to 128, no
//     white space, no control characters, no "/" (an id is one segment of
//     a URL path);
//   - Email: 3 to 254 (RFC 5321's limit on a path), one address
//     as net/mail parses it, no display name, no angle brackets, no
//     comments;
//   - Name: 1 to 200, no control characters;
//   - Currency: the ISO 4217 alphabetic code of a currency in use, in
//     upper case, such as EUR (CheckCurrency; fund codes, metals and
//     withdrawn codes are refused);
//   - Amount: in minor units (cents), 1 to MaxAmount;
//   - Reason (CancelTransfer): 0 to 500, no control characters;
//   - Word (GuessWord): 1 to 64, letters only.
//
// Every text field is valid UTF-8 without control characters (a NUL byte
// included, which PostgreSQL cannot store). CheckID, CheckCurrency,
// CheckWord and CheckEmail check one value by the same rules, for values
// that arrive outside a command. Values are validated, not changed: the
// handler stores the normalised form. The package imports nothing of
// claimbus: commands are plain data that any transport can carry.
package commands
