"""The network of brokers: links, discovery, demand and redistribution (to come)."""
