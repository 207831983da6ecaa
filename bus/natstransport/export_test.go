package natstransport

// Subject returns the subject topic's messages are published to.
func Subject(t *Transport, topic string) string { return t.subject(topic) }

// ConsumerName returns the name of topic's durable consumer.
func ConsumerName(t *Transport, topic string) string { return t.consumerName(topic) }
