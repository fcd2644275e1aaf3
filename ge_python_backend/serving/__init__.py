"""The request path, free of Triton, one for every request: requests in, one answer per request out.

``requests`` is what GEModel reads from Triton; ``validation`` prepares each request (the
``preprocess`` hook, sequence state, checks decided by its signature made once per signature);
``runner`` groups requests that may share a batch, dispatches engine batches to free slots, runs
them on worker threads and answers every request exactly once; ``batching`` plans those batches
over the model's gears (fewest calls, then least padding), gathers the rows into the slot's
buffers and scatters the outputs; ``axes`` knows each tensor's batch axis; ``outputs`` casts what
a request asked for to the config's types; ``sequences`` keeps state per correlation ID;
``observers`` hears the phases and failures (metrics).
"""
