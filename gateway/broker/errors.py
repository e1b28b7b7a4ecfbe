class BrokerError(Exception):
    """A request the broker refuses; the message is meant for the client."""
