package commands

// FieldError is the reason a command is invalid: the field at fault (its
// JSON name) and what is wrong with it.
type FieldError struct {
	// Name is the JSON name of the field, such as "email".
	Name string
	// Reason says what is wrong, for people; it never quotes the value.
	Reason string
}

// Field returns the JSON name of the field at fault.
func (e *FieldError) Field() string { return e.Name }

// Error returns "commands: invalid <field>: <reason>".
func (e *FieldError) Error() string { return "commands: invalid " + e.Name + ": " + e.Reason }
