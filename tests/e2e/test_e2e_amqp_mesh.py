"""AMQP across the mesh with real processes: a queue and exchange declared with pika
on one node route on every node; AMQP and STOMP clients on different nodes read
each other's messages; a Celery worker on one node runs tasks sent through
another, with results in Redis, and a task whose worker is killed mid-run is run
again by the next worker."""

from __future__ import annotations

import signal
import textwrap

import pika
from amqp_support import AMQP_ON, CeleryWorker, amqp_url
from e2e_support import unique
from mesh_support import mesh_fixture, wait_until  # noqa: F401  (the fixture)


def routes(connection, exchange: str, routing_key: str) -> bool:
    """Whether a mandatory publish on a fresh confirming channel of ``connection`` finds a
    queue: a node learns exchanges and bindings over its links, and routes nothing before."""
    channel = connection.channel()
    channel.confirm_delivery()
    try:
        channel.basic_publish(exchange, routing_key, b"probe", mandatory=True)
        return True
    except (pika.exceptions.UnroutableError, pika.exceptions.ChannelClosedByBroker):
        return False


def test_definitions_made_over_amqp_route_on_every_node_and_stomp_reads_them(mesh, amqp):
    a, b = mesh(2, sets=[AMQP_ON])
    on_a = amqp(a.proc).channel()
    exchange, queue = unique("orders"), unique("invoices")
    on_a.exchange_declare(exchange, "topic", durable=True)
    on_a.queue_declare(queue, durable=True)
    on_a.queue_bind(queue, exchange, "invoice.#")
    to_b = amqp(b.proc)
    wait_until(lambda: routes(to_b, exchange, "invoice.eu"), "b to route to the queue declared on a", timeout=15,
               interval=0.2)
    on_b = to_b.channel()
    for i in range(10):
        on_b.basic_publish(exchange, "invoice.eu", b"from b %d" % i, pika.BasicProperties(delivery_mode=2))
    # A STOMP consumer on a reads what was published over AMQP on b (it waits on b, follows the consumer).
    reader = a.client()
    reader.subscribe("/queue/" + queue)
    reader.listener.wait_until(lambda: len(reader.listener.messages) >= 11, "the messages published on b")
    bodies = [m.body for m in reader.listener.messages]
    assert bodies[0] == "probe" and bodies[1:] == [f"from b {i}" for i in range(10)]
    assert reader.listener.messages[1].headers["persistent"] == "true"
    # And the other way: a STOMP SEND on b reaches an AMQP consumer on a.
    reader.disconnect()  # first: else the STOMP reader could still take it
    stomp_on_b = b.client()
    stomp_on_b.send("/queue/" + queue, "from stomp on b", receipt=True)
    got = []
    for method, _, body in on_a.consume(queue, inactivity_timeout=10):
        assert method is not None, "the STOMP message never reached the AMQP consumer"
        got.append(body)
        on_a.basic_ack(method.delivery_tag)
        break
    assert got == [b"from stomp on b"]


CELERY_APP = """
    import os, time
    from celery import Celery
    app = Celery("meshtasks", broker=os.environ["BROKER"], backend=os.environ["BACKEND"])
    app.conf.update(broker_connection_retry_on_startup=True, task_acks_late=True,
                    task_reject_on_worker_lost=True, worker_prefetch_multiplier=1,
                    broker_heartbeat=0, result_expires=600)

    @app.task
    def add(x, y):
        return x + y

    @app.task
    def slow(marker):
        open(marker, "a").write("started\\n")
        time.sleep(30)
        return "slow done"

    @app.task
    def quick(marker):
        open(marker, "a").write("ran again\\n")
        return "quick done"
"""


def test_a_celery_worker_on_one_node_runs_tasks_sent_through_another_and_a_killed_task_runs_again(
        mesh, redis_server, tmp_path, monkeypatch):
    a, b = mesh(2, sets=[AMQP_ON])
    (tmp_path / "meshtasks.py").write_text(textwrap.dedent(CELERY_APP))
    backend = redis_server.url
    url_a, url_b = amqp_url(a.proc), amqp_url(b.proc)
    workers = [CeleryWorker(tmp_path, "meshtasks", "w1", url_b, backend)]
    try:
        workers[0].wait_ready()
        monkeypatch.setenv("BROKER", url_a)
        monkeypatch.setenv("BACKEND", backend)
        monkeypatch.syspath_prepend(str(tmp_path))
        import meshtasks  # noqa: PLC0415 - the app the test just wrote

        results = [meshtasks.add.delay(i, i) for i in range(20)]
        assert [r.get(timeout=60) for r in results] == [2 * i for i in range(20)]

        marker = tmp_path / "marker.txt"
        slow = meshtasks.slow.delay(str(marker))
        wait_until(lambda: marker.exists() and "started" in marker.read_text(), "the slow task to start",
                   timeout=60)
        workers[0].stop(signal.SIGKILL)  # mid-task: acks_late, so the message was not acknowledged
        workers.append(CeleryWorker(tmp_path, "meshtasks", "w2", url_b, backend))
        workers[1].wait_ready()
        wait_until(lambda: marker.read_text().count("started") >= 2, "the killed task to be delivered again",
                   timeout=60)
        assert slow.id in workers[1].output()  # the same task, run by the next worker
        meshtasks.app.close()
    finally:
        for worker in workers:
            worker.stop(signal.SIGKILL)


def test_a_mandatory_message_no_queue_in_the_mesh_takes_comes_back(mesh, amqp):
    a, b = mesh(2, sets=[AMQP_ON])
    exchange, queue = unique("routes"), unique("bound-on-b")
    on_b = amqp(b.proc).channel()
    on_b.exchange_declare(exchange, "direct", durable=True)
    on_b.queue_declare(queue, durable=True)
    on_b.queue_bind(queue, exchange, "known")
    to_a = amqp(a.proc)
    wait_until(lambda: routes(to_a, exchange, "known"), "a to route to the queue bound on b", timeout=15, interval=0.2)
    on_a = to_a.channel()
    on_a.confirm_delivery()
    try:
        on_a.basic_publish(exchange, "unknown", b"nobody", mandatory=True)
        returned = False
    except pika.exceptions.UnroutableError as error:
        returned = [message.body for message in error.messages] == [b"nobody"]
    assert returned

