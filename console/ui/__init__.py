"""The console's pages: overview, topology, queues, redistribution, connections,
links, events. Server-rendered shells; the data comes from the API and the
WebSocket, drawn by vendored libraries (static/vendor)."""
