"""The request path, free of Triton: requests in, one answer per request out.

``requests`` is what GEModel reads from Triton; ``validation`` prepares each request alone (the
``preprocess`` hook, sequence state, data type and shape checks); ``runner`` groups requests whose
non-batch shapes agree, dispatches engine batches to free slots and runs them on worker threads;
``batching`` plans those batches over the model's gears (fewest calls, then least padding),
gathers the rows into the slot's buffers and scatters the outputs; ``axes`` knows each tensor's
batch axis; ``outputs`` casts what a request asked for to the config's types; ``tracking``
answers every request exactly once; ``sequences`` keeps state per correlation ID; ``observers``
hears the phases and failures (metrics).
"""
