"""Live updates: the worker that tails the nodes' streams (``manage.py meshwatch``)
and the WebSocket consumer that hands its updates to browsers."""
