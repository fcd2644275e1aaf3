"""The streams and events a model creates when it loads, read from its file.

ATC records them as ModelDef attributes ``stream_num`` and ``event_num`` (ATTR_MODEL_STREAM_NUM,
ATTR_MODEL_EVENT_NUM: hicann/ge graph_metadef/graph/attr/ge_attr_define.cc 744, 746; set at
compiler/graph/build/graph_builder.cc 189-190; ``atc --mode=1`` prints them, api/atc/omg.cc
982-988). At load GE reads them (runtime/v1/graph/load/model_manager/model_utils.cc 1321-1324) and
creates that many streams and events for the model (davinci_model.cc 1460-1509); an offline model
executed with aclmdlExecuteAsync runs on the caller's stream. A simulated .om may record the same
numbers (its reader lives with the simulator). A file that records neither is counted with one stream
and no events.

Whether a load goes to the dynamic-shape executor (RT2) is read from the file too, as the ACL layer
decides it before loading: ``gert::IsDynamicModel`` is ``ModelParserBase::IsDynamicModel`` of the
file header (hicann/ge api/acl/acl_model/model/model.cpp 307-318, runtime/v2/api/api.cc 233-250,
base/common/helper/model_parser_base.cc 137-140): a v2 header with several models or
``is_unknow_model``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

#: streams and events a model whose file records none is counted with
DEFAULT_MODEL_STREAMS, DEFAULT_MODEL_EVENTS = 1, 0


@dataclass(frozen=True)
class ModelResources:
    """Streams and events one load of a model takes; ``recorded`` says the file gave them."""

    streams: int = DEFAULT_MODEL_STREAMS
    events: int = DEFAULT_MODEL_EVENTS
    recorded: bool = False
    #: the load goes to the dynamic-shape executor (RT2), whose load creates one more stream for a while
    dynamic: bool = False

    def describe(self) -> str:
        if self.recorded:
            return f"{self.streams} stream(s) and {self.events} event(s) (stream_num/event_num in the file)"
        return f"{self.streams} stream(s) and {self.events} event(s) (assumed: the file records no stream_num)"


def recorded_resources(facts: Mapping[str, str], *, dynamic: bool) -> ModelResources:
    """The resources a file's facts ``stream_num`` / ``event_num`` record (the defaults for what
    they do not); ``dynamic``: a load goes to the dynamic-shape executor."""
    streams, events = _count(facts.get("stream_num")), _count(facts.get("event_num"))
    if streams is None and events is None:
        return ModelResources(dynamic=dynamic)
    return ModelResources(
        DEFAULT_MODEL_STREAMS if streams is None else streams,
        DEFAULT_MODEL_EVENTS if events is None else events,
        True,
        dynamic,
    )


def _count(text: str | None) -> int | None:
    try:
        value = int(text) if text is not None else None
    except ValueError:
        return None
    return value if value is not None and value >= 0 else None
