"""The protocol-neutral broker core: destinations, dispatch, acknowledgement,
transactions. It knows nothing of STOMP or AMQP; protocol adapters drive it."""
