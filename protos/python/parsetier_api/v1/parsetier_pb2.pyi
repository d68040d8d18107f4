from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class WireDialect(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    WIRE_DIALECT_UNSPECIFIED: _ClassVar[WireDialect]
    WIRE_DIALECT_OPENAI_CHAT: _ClassVar[WireDialect]
    WIRE_DIALECT_OPENAI_COMPLETIONS: _ClassVar[WireDialect]
    WIRE_DIALECT_ANTHROPIC_MESSAGES: _ClassVar[WireDialect]
    WIRE_DIALECT_OPENAI_RESPONSES: _ClassVar[WireDialect]

class ToolChoiceMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TOOL_CHOICE_MODE_UNSPECIFIED: _ClassVar[ToolChoiceMode]
    TOOL_CHOICE_MODE_AUTO: _ClassVar[ToolChoiceMode]
    TOOL_CHOICE_MODE_NONE: _ClassVar[ToolChoiceMode]
    TOOL_CHOICE_MODE_REQUIRED: _ClassVar[ToolChoiceMode]

class OutputKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OUTPUT_KIND_UNSPECIFIED: _ClassVar[OutputKind]
    OUTPUT_KIND_DELTAS: _ClassVar[OutputKind]
    OUTPUT_KIND_EVENTS: _ClassVar[OutputKind]
    OUTPUT_KIND_DELTAS_AND_EVENTS: _ClassVar[OutputKind]
    OUTPUT_KIND_FINAL_ONLY: _ClassVar[OutputKind]

class FinishReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FINISH_REASON_UNSPECIFIED: _ClassVar[FinishReason]
    FINISH_REASON_STOP: _ClassVar[FinishReason]
    FINISH_REASON_LENGTH: _ClassVar[FinishReason]
    FINISH_REASON_ABORT: _ClassVar[FinishReason]
    FINISH_REASON_TOOL_CALLS: _ClassVar[FinishReason]

class EventKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EVENT_KIND_UNSPECIFIED: _ClassVar[EventKind]
    EVENT_KIND_CONTENT: _ClassVar[EventKind]
    EVENT_KIND_REASONING_START: _ClassVar[EventKind]
    EVENT_KIND_REASONING: _ClassVar[EventKind]
    EVENT_KIND_REASONING_END: _ClassVar[EventKind]
    EVENT_KIND_TOOL_CALL_START: _ClassVar[EventKind]
    EVENT_KIND_TOOL_ARGUMENTS: _ClassVar[EventKind]
    EVENT_KIND_TOOL_CALL_END: _ClassVar[EventKind]
    EVENT_KIND_END: _ClassVar[EventKind]

class FormatSource(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FORMAT_SOURCE_UNSPECIFIED: _ClassVar[FormatSource]
    FORMAT_SOURCE_FORMAT_FILE: _ClassVar[FormatSource]
    FORMAT_SOURCE_RESPONSE_TEMPLATE: _ClassVar[FormatSource]

class TokenizerStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TOKENIZER_STATUS_UNSPECIFIED: _ClassVar[TokenizerStatus]
    TOKENIZER_STATUS_READY: _ClassVar[TokenizerStatus]
    TOKENIZER_STATUS_NOT_INSTALLED: _ClassVar[TokenizerStatus]
    TOKENIZER_STATUS_NOT_CONFIGURED: _ClassVar[TokenizerStatus]

class ConstraintReasoning(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CONSTRAINT_REASONING_UNSPECIFIED: _ClassVar[ConstraintReasoning]
    CONSTRAINT_REASONING_NONE: _ClassVar[ConstraintReasoning]
    CONSTRAINT_REASONING_BLOCK: _ClassVar[ConstraintReasoning]
    CONSTRAINT_REASONING_CONTINUED: _ClassVar[ConstraintReasoning]
    CONSTRAINT_REASONING_OPTIONAL: _ClassVar[ConstraintReasoning]
WIRE_DIALECT_UNSPECIFIED: WireDialect
WIRE_DIALECT_OPENAI_CHAT: WireDialect
WIRE_DIALECT_OPENAI_COMPLETIONS: WireDialect
WIRE_DIALECT_ANTHROPIC_MESSAGES: WireDialect
WIRE_DIALECT_OPENAI_RESPONSES: WireDialect
TOOL_CHOICE_MODE_UNSPECIFIED: ToolChoiceMode
TOOL_CHOICE_MODE_AUTO: ToolChoiceMode
TOOL_CHOICE_MODE_NONE: ToolChoiceMode
TOOL_CHOICE_MODE_REQUIRED: ToolChoiceMode
OUTPUT_KIND_UNSPECIFIED: OutputKind
OUTPUT_KIND_DELTAS: OutputKind
OUTPUT_KIND_EVENTS: OutputKind
OUTPUT_KIND_DELTAS_AND_EVENTS: OutputKind
OUTPUT_KIND_FINAL_ONLY: OutputKind
FINISH_REASON_UNSPECIFIED: FinishReason
FINISH_REASON_STOP: FinishReason
FINISH_REASON_LENGTH: FinishReason
FINISH_REASON_ABORT: FinishReason
FINISH_REASON_TOOL_CALLS: FinishReason
EVENT_KIND_UNSPECIFIED: EventKind
EVENT_KIND_CONTENT: EventKind
EVENT_KIND_REASONING_START: EventKind
EVENT_KIND_REASONING: EventKind
EVENT_KIND_REASONING_END: EventKind
EVENT_KIND_TOOL_CALL_START: EventKind
EVENT_KIND_TOOL_ARGUMENTS: EventKind
EVENT_KIND_TOOL_CALL_END: EventKind
EVENT_KIND_END: EventKind
FORMAT_SOURCE_UNSPECIFIED: FormatSource
FORMAT_SOURCE_FORMAT_FILE: FormatSource
FORMAT_SOURCE_RESPONSE_TEMPLATE: FormatSource
TOKENIZER_STATUS_UNSPECIFIED: TokenizerStatus
TOKENIZER_STATUS_READY: TokenizerStatus
TOKENIZER_STATUS_NOT_INSTALLED: TokenizerStatus
TOKENIZER_STATUS_NOT_CONFIGURED: TokenizerStatus
CONSTRAINT_REASONING_UNSPECIFIED: ConstraintReasoning
CONSTRAINT_REASONING_NONE: ConstraintReasoning
CONSTRAINT_REASONING_BLOCK: ConstraintReasoning
CONSTRAINT_REASONING_CONTINUED: ConstraintReasoning
CONSTRAINT_REASONING_OPTIONAL: ConstraintReasoning

class ParseRequest(_message.Message):
    __slots__ = ("open", "steps", "finish")
    OPEN_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    FINISH_FIELD_NUMBER: _ClassVar[int]
    open: Open
    steps: _containers.RepeatedCompositeFieldContainer[Step]
    finish: Finish
    def __init__(self, open: _Optional[_Union[Open, _Mapping]] = ..., steps: _Optional[_Iterable[_Union[Step, _Mapping]]] = ..., finish: _Optional[_Union[Finish, _Mapping]] = ...) -> None: ...

class Open(_message.Message):
    __slots__ = ("model", "request_id", "tools", "tools_json", "tool_choice", "parallel_tool_calls", "include_reasoning", "thinking", "chat_template_kwargs", "prompt_token_ids", "output", "include_stop_text", "complete_tool_calls", "resume", "resumable", "return_token_ids", "completion", "choice_index", "stop", "stop_token_ids", "wire")
    class ChatTemplateKwargsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    MODEL_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    TOOLS_JSON_FIELD_NUMBER: _ClassVar[int]
    TOOL_CHOICE_FIELD_NUMBER: _ClassVar[int]
    PARALLEL_TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_REASONING_FIELD_NUMBER: _ClassVar[int]
    THINKING_FIELD_NUMBER: _ClassVar[int]
    CHAT_TEMPLATE_KWARGS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_STOP_TEXT_FIELD_NUMBER: _ClassVar[int]
    COMPLETE_TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    RESUME_FIELD_NUMBER: _ClassVar[int]
    RESUMABLE_FIELD_NUMBER: _ClassVar[int]
    RETURN_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_FIELD_NUMBER: _ClassVar[int]
    CHOICE_INDEX_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    STOP_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    WIRE_FIELD_NUMBER: _ClassVar[int]
    model: str
    request_id: str
    tools: _containers.RepeatedCompositeFieldContainer[Tool]
    tools_json: str
    tool_choice: ToolChoice
    parallel_tool_calls: bool
    include_reasoning: bool
    thinking: bool
    chat_template_kwargs: _containers.ScalarMap[str, str]
    prompt_token_ids: _containers.RepeatedScalarFieldContainer[int]
    output: OutputKind
    include_stop_text: bool
    complete_tool_calls: bool
    resume: ResumePoint
    resumable: bool
    return_token_ids: bool
    completion: CompletionOptions
    choice_index: int
    stop: _containers.RepeatedScalarFieldContainer[str]
    stop_token_ids: _containers.RepeatedScalarFieldContainer[int]
    wire: WireOptions
    def __init__(self, model: _Optional[str] = ..., request_id: _Optional[str] = ..., tools: _Optional[_Iterable[_Union[Tool, _Mapping]]] = ..., tools_json: _Optional[str] = ..., tool_choice: _Optional[_Union[ToolChoice, _Mapping]] = ..., parallel_tool_calls: _Optional[bool] = ..., include_reasoning: _Optional[bool] = ..., thinking: _Optional[bool] = ..., chat_template_kwargs: _Optional[_Mapping[str, str]] = ..., prompt_token_ids: _Optional[_Iterable[int]] = ..., output: _Optional[_Union[OutputKind, str]] = ..., include_stop_text: _Optional[bool] = ..., complete_tool_calls: _Optional[bool] = ..., resume: _Optional[_Union[ResumePoint, _Mapping]] = ..., resumable: _Optional[bool] = ..., return_token_ids: _Optional[bool] = ..., completion: _Optional[_Union[CompletionOptions, _Mapping]] = ..., choice_index: _Optional[int] = ..., stop: _Optional[_Iterable[str]] = ..., stop_token_ids: _Optional[_Iterable[int]] = ..., wire: _Optional[_Union[WireOptions, _Mapping]] = ...) -> None: ...

class WireOptions(_message.Message):
    __slots__ = ("dialect", "response_id", "model", "created", "stream", "include_usage", "prompt_tokens")
    DIALECT_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_USAGE_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    dialect: WireDialect
    response_id: str
    model: str
    created: int
    stream: bool
    include_usage: bool
    prompt_tokens: int
    def __init__(self, dialect: _Optional[_Union[WireDialect, str]] = ..., response_id: _Optional[str] = ..., model: _Optional[str] = ..., created: _Optional[int] = ..., stream: _Optional[bool] = ..., include_usage: _Optional[bool] = ..., prompt_tokens: _Optional[int] = ...) -> None: ...

class ResumePoint(_message.Message):
    __slots__ = ("sequence", "history", "output_digest")
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    HISTORY_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_DIGEST_FIELD_NUMBER: _ClassVar[int]
    sequence: int
    history: _containers.RepeatedCompositeFieldContainer[Step]
    output_digest: int
    def __init__(self, sequence: _Optional[int] = ..., history: _Optional[_Iterable[_Union[Step, _Mapping]]] = ..., output_digest: _Optional[int] = ...) -> None: ...

class CompletionOptions(_message.Message):
    __slots__ = ("skip_special_tokens", "spaces_between_special_tokens")
    SKIP_SPECIAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    SPACES_BETWEEN_SPECIAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    skip_special_tokens: bool
    spaces_between_special_tokens: bool
    def __init__(self, skip_special_tokens: _Optional[bool] = ..., spaces_between_special_tokens: _Optional[bool] = ...) -> None: ...

class Tool(_message.Message):
    __slots__ = ("name", "description", "parameters_json", "strict")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_JSON_FIELD_NUMBER: _ClassVar[int]
    STRICT_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    parameters_json: str
    strict: bool
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., parameters_json: _Optional[str] = ..., strict: _Optional[bool] = ...) -> None: ...

class ToolChoice(_message.Message):
    __slots__ = ("mode", "function_name")
    MODE_FIELD_NUMBER: _ClassVar[int]
    FUNCTION_NAME_FIELD_NUMBER: _ClassVar[int]
    mode: ToolChoiceMode
    function_name: str
    def __init__(self, mode: _Optional[_Union[ToolChoiceMode, str]] = ..., function_name: _Optional[str] = ...) -> None: ...

class Step(_message.Message):
    __slots__ = ("token_ids", "text", "text_tokens", "logprobs")
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TEXT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    text: str
    text_tokens: int
    logprobs: StepLogprobs
    def __init__(self, token_ids: _Optional[_Iterable[int]] = ..., text: _Optional[str] = ..., text_tokens: _Optional[int] = ..., logprobs: _Optional[_Union[StepLogprobs, _Mapping]] = ...) -> None: ...

class StepLogprobs(_message.Message):
    __slots__ = ("token_logprobs", "top_token_ids", "top_logprobs")
    TOKEN_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    TOP_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    TOP_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    token_logprobs: _containers.RepeatedScalarFieldContainer[float]
    top_token_ids: _containers.RepeatedScalarFieldContainer[int]
    top_logprobs: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, token_logprobs: _Optional[_Iterable[float]] = ..., top_token_ids: _Optional[_Iterable[int]] = ..., top_logprobs: _Optional[_Iterable[float]] = ...) -> None: ...

class Finish(_message.Message):
    __slots__ = ("reason", "stop_token_id", "stop_string", "other_choices_usage")
    REASON_FIELD_NUMBER: _ClassVar[int]
    STOP_TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    STOP_STRING_FIELD_NUMBER: _ClassVar[int]
    OTHER_CHOICES_USAGE_FIELD_NUMBER: _ClassVar[int]
    reason: FinishReason
    stop_token_id: int
    stop_string: str
    other_choices_usage: Usage
    def __init__(self, reason: _Optional[_Union[FinishReason, str]] = ..., stop_token_id: _Optional[int] = ..., stop_string: _Optional[str] = ..., other_choices_usage: _Optional[_Union[Usage, _Mapping]] = ...) -> None: ...

class ParseResponse(_message.Message):
    __slots__ = ("sequence", "client_messages", "deltas", "events", "final", "part", "output_digest", "wire")
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    CLIENT_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    DELTAS_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    FINAL_FIELD_NUMBER: _ClassVar[int]
    PART_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_DIGEST_FIELD_NUMBER: _ClassVar[int]
    WIRE_FIELD_NUMBER: _ClassVar[int]
    sequence: int
    client_messages: int
    deltas: _containers.RepeatedCompositeFieldContainer[Delta]
    events: _containers.RepeatedCompositeFieldContainer[Event]
    final: Final
    part: ReplyPart
    output_digest: int
    wire: bytes
    def __init__(self, sequence: _Optional[int] = ..., client_messages: _Optional[int] = ..., deltas: _Optional[_Iterable[_Union[Delta, _Mapping]]] = ..., events: _Optional[_Iterable[_Union[Event, _Mapping]]] = ..., final: _Optional[_Union[Final, _Mapping]] = ..., part: _Optional[_Union[ReplyPart, _Mapping]] = ..., output_digest: _Optional[int] = ..., wire: _Optional[bytes] = ...) -> None: ...

class ReplyPart(_message.Message):
    __slots__ = ("data", "more")
    DATA_FIELD_NUMBER: _ClassVar[int]
    MORE_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    more: bool
    def __init__(self, data: _Optional[bytes] = ..., more: _Optional[bool] = ...) -> None: ...

class Delta(_message.Message):
    __slots__ = ("reasoning", "content", "tool_calls", "logprobs", "token_ids")
    REASONING_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    reasoning: str
    content: str
    tool_calls: _containers.RepeatedCompositeFieldContainer[ToolCallDelta]
    logprobs: _containers.RepeatedCompositeFieldContainer[TokenLogprob]
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, reasoning: _Optional[str] = ..., content: _Optional[str] = ..., tool_calls: _Optional[_Iterable[_Union[ToolCallDelta, _Mapping]]] = ..., logprobs: _Optional[_Iterable[_Union[TokenLogprob, _Mapping]]] = ..., token_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class TokenLogprob(_message.Message):
    __slots__ = ("token_id", "token", "bytes", "logprob", "text_offset", "top_logprobs")
    TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    LOGPROB_FIELD_NUMBER: _ClassVar[int]
    TEXT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    TOP_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    token_id: int
    token: str
    bytes: bytes
    logprob: float
    text_offset: int
    top_logprobs: _containers.RepeatedCompositeFieldContainer[TopLogprob]
    def __init__(self, token_id: _Optional[int] = ..., token: _Optional[str] = ..., bytes: _Optional[bytes] = ..., logprob: _Optional[float] = ..., text_offset: _Optional[int] = ..., top_logprobs: _Optional[_Iterable[_Union[TopLogprob, _Mapping]]] = ...) -> None: ...

class TopLogprob(_message.Message):
    __slots__ = ("token_id", "token", "bytes", "logprob")
    TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    LOGPROB_FIELD_NUMBER: _ClassVar[int]
    token_id: int
    token: str
    bytes: bytes
    logprob: float
    def __init__(self, token_id: _Optional[int] = ..., token: _Optional[str] = ..., bytes: _Optional[bytes] = ..., logprob: _Optional[float] = ...) -> None: ...

class ToolCallDelta(_message.Message):
    __slots__ = ("index", "id", "name", "arguments")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    index: int
    id: str
    name: str
    arguments: str
    def __init__(self, index: _Optional[int] = ..., id: _Optional[str] = ..., name: _Optional[str] = ..., arguments: _Optional[str] = ...) -> None: ...

class Event(_message.Message):
    __slots__ = ("kind", "text", "tool_index", "tokens", "call_id")
    KIND_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TOOL_INDEX_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    kind: EventKind
    text: str
    tool_index: int
    tokens: int
    call_id: str
    def __init__(self, kind: _Optional[_Union[EventKind, str]] = ..., text: _Optional[str] = ..., tool_index: _Optional[int] = ..., tokens: _Optional[int] = ..., call_id: _Optional[str] = ...) -> None: ...

class Final(_message.Message):
    __slots__ = ("finish_reason", "usage", "message", "logprobs", "token_ids", "wire")
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    WIRE_FIELD_NUMBER: _ClassVar[int]
    finish_reason: FinishReason
    usage: Usage
    message: AssistantMessage
    logprobs: _containers.RepeatedCompositeFieldContainer[TokenLogprob]
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    wire: bytes
    def __init__(self, finish_reason: _Optional[_Union[FinishReason, str]] = ..., usage: _Optional[_Union[Usage, _Mapping]] = ..., message: _Optional[_Union[AssistantMessage, _Mapping]] = ..., logprobs: _Optional[_Iterable[_Union[TokenLogprob, _Mapping]]] = ..., token_ids: _Optional[_Iterable[int]] = ..., wire: _Optional[bytes] = ...) -> None: ...

class Usage(_message.Message):
    __slots__ = ("completion_tokens", "reasoning_tokens")
    COMPLETION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    REASONING_TOKENS_FIELD_NUMBER: _ClassVar[int]
    completion_tokens: int
    reasoning_tokens: int
    def __init__(self, completion_tokens: _Optional[int] = ..., reasoning_tokens: _Optional[int] = ...) -> None: ...

class AssistantMessage(_message.Message):
    __slots__ = ("content", "reasoning", "tool_calls")
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    REASONING_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    content: str
    reasoning: str
    tool_calls: _containers.RepeatedCompositeFieldContainer[ToolCall]
    def __init__(self, content: _Optional[str] = ..., reasoning: _Optional[str] = ..., tool_calls: _Optional[_Iterable[_Union[ToolCall, _Mapping]]] = ...) -> None: ...

class ToolCall(_message.Message):
    __slots__ = ("id", "name", "arguments")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    arguments: str
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., arguments: _Optional[str] = ...) -> None: ...

class ParseOnceRequest(_message.Message):
    __slots__ = ("open", "token_ids", "text", "finish", "text_tokens", "logprobs")
    OPEN_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    FINISH_FIELD_NUMBER: _ClassVar[int]
    TEXT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    open: Open
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    text: str
    finish: Finish
    text_tokens: int
    logprobs: StepLogprobs
    def __init__(self, open: _Optional[_Union[Open, _Mapping]] = ..., token_ids: _Optional[_Iterable[int]] = ..., text: _Optional[str] = ..., finish: _Optional[_Union[Finish, _Mapping]] = ..., text_tokens: _Optional[int] = ..., logprobs: _Optional[_Union[StepLogprobs, _Mapping]] = ...) -> None: ...

class ParseOnceResponse(_message.Message):
    __slots__ = ("final", "deltas", "events", "wire")
    FINAL_FIELD_NUMBER: _ClassVar[int]
    DELTAS_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    WIRE_FIELD_NUMBER: _ClassVar[int]
    final: Final
    deltas: _containers.RepeatedCompositeFieldContainer[Delta]
    events: _containers.RepeatedCompositeFieldContainer[Event]
    wire: bytes
    def __init__(self, final: _Optional[_Union[Final, _Mapping]] = ..., deltas: _Optional[_Iterable[_Union[Delta, _Mapping]]] = ..., events: _Optional[_Iterable[_Union[Event, _Mapping]]] = ..., wire: _Optional[bytes] = ...) -> None: ...

class ListModelsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListModelsResponse(_message.Message):
    __slots__ = ("models",)
    MODELS_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedCompositeFieldContainer[ModelInfo]
    def __init__(self, models: _Optional[_Iterable[_Union[ModelInfo, _Mapping]]] = ...) -> None: ...

class ModelInfo(_message.Message):
    __slots__ = ("name", "format", "tokenizer", "tokenizer_available", "description", "capabilities", "tokenizer_status", "tokenizer_hint", "format_source")
    NAME_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    TOKENIZER_FIELD_NUMBER: _ClassVar[int]
    TOKENIZER_AVAILABLE_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    TOKENIZER_STATUS_FIELD_NUMBER: _ClassVar[int]
    TOKENIZER_HINT_FIELD_NUMBER: _ClassVar[int]
    FORMAT_SOURCE_FIELD_NUMBER: _ClassVar[int]
    name: str
    format: str
    tokenizer: str
    tokenizer_available: bool
    description: str
    capabilities: Capabilities
    tokenizer_status: TokenizerStatus
    tokenizer_hint: str
    format_source: FormatSource
    def __init__(self, name: _Optional[str] = ..., format: _Optional[str] = ..., tokenizer: _Optional[str] = ..., tokenizer_available: _Optional[bool] = ..., description: _Optional[str] = ..., capabilities: _Optional[_Union[Capabilities, _Mapping]] = ..., tokenizer_status: _Optional[_Union[TokenizerStatus, str]] = ..., tokenizer_hint: _Optional[str] = ..., format_source: _Optional[_Union[FormatSource, str]] = ...) -> None: ...

class Capabilities(_message.Message):
    __slots__ = ("reasoning", "tool_calls")
    REASONING_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    reasoning: bool
    tool_calls: bool
    def __init__(self, reasoning: _Optional[bool] = ..., tool_calls: _Optional[bool] = ...) -> None: ...

class BuildConstraintRequest(_message.Message):
    __slots__ = ("open",)
    OPEN_FIELD_NUMBER: _ClassVar[int]
    open: Open
    def __init__(self, open: _Optional[_Union[Open, _Mapping]] = ...) -> None: ...

class BuildConstraintResponse(_message.Message):
    __slots__ = ("structural_tag_json", "lark_grammar", "triggers", "reasoning", "message_start_anchors")
    STRUCTURAL_TAG_JSON_FIELD_NUMBER: _ClassVar[int]
    LARK_GRAMMAR_FIELD_NUMBER: _ClassVar[int]
    TRIGGERS_FIELD_NUMBER: _ClassVar[int]
    REASONING_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_START_ANCHORS_FIELD_NUMBER: _ClassVar[int]
    structural_tag_json: str
    lark_grammar: str
    triggers: _containers.RepeatedScalarFieldContainer[str]
    reasoning: ConstraintReasoning
    message_start_anchors: _containers.RepeatedCompositeFieldContainer[MessageStartAnchor]
    def __init__(self, structural_tag_json: _Optional[str] = ..., lark_grammar: _Optional[str] = ..., triggers: _Optional[_Iterable[str]] = ..., reasoning: _Optional[_Union[ConstraintReasoning, str]] = ..., message_start_anchors: _Optional[_Iterable[_Union[MessageStartAnchor, _Mapping]]] = ...) -> None: ...

class MessageStartAnchor(_message.Message):
    __slots__ = ("text", "in_reasoning")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    IN_REASONING_FIELD_NUMBER: _ClassVar[int]
    text: str
    in_reasoning: bool
    def __init__(self, text: _Optional[str] = ..., in_reasoning: _Optional[bool] = ...) -> None: ...

class ParseBatchRequest(_message.Message):
    __slots__ = ("sessions", "packed")
    SESSIONS_FIELD_NUMBER: _ClassVar[int]
    PACKED_FIELD_NUMBER: _ClassVar[int]
    sessions: _containers.RepeatedCompositeFieldContainer[SessionInput]
    packed: PackedSteps
    def __init__(self, sessions: _Optional[_Iterable[_Union[SessionInput, _Mapping]]] = ..., packed: _Optional[_Union[PackedSteps, _Mapping]] = ...) -> None: ...

class PackedSteps(_message.Message):
    __slots__ = ("keys", "token_counts", "token_ids")
    KEYS_FIELD_NUMBER: _ClassVar[int]
    TOKEN_COUNTS_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    keys: _containers.RepeatedScalarFieldContainer[str]
    token_counts: _containers.RepeatedScalarFieldContainer[int]
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, keys: _Optional[_Iterable[str]] = ..., token_counts: _Optional[_Iterable[int]] = ..., token_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class SessionInput(_message.Message):
    __slots__ = ("key", "open", "steps", "finish", "cancel")
    KEY_FIELD_NUMBER: _ClassVar[int]
    OPEN_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    FINISH_FIELD_NUMBER: _ClassVar[int]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    key: str
    open: Open
    steps: _containers.RepeatedCompositeFieldContainer[Step]
    finish: Finish
    cancel: bool
    def __init__(self, key: _Optional[str] = ..., open: _Optional[_Union[Open, _Mapping]] = ..., steps: _Optional[_Iterable[_Union[Step, _Mapping]]] = ..., finish: _Optional[_Union[Finish, _Mapping]] = ..., cancel: _Optional[bool] = ...) -> None: ...

class ParseBatchResponse(_message.Message):
    __slots__ = ("client_messages", "sessions", "part", "packed")
    CLIENT_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    SESSIONS_FIELD_NUMBER: _ClassVar[int]
    PART_FIELD_NUMBER: _ClassVar[int]
    PACKED_FIELD_NUMBER: _ClassVar[int]
    client_messages: int
    sessions: _containers.RepeatedCompositeFieldContainer[SessionOutput]
    part: ReplyPart
    packed: PackedOutputs
    def __init__(self, client_messages: _Optional[int] = ..., sessions: _Optional[_Iterable[_Union[SessionOutput, _Mapping]]] = ..., part: _Optional[_Union[ReplyPart, _Mapping]] = ..., packed: _Optional[_Union[PackedOutputs, _Mapping]] = ...) -> None: ...

class PackedOutputs(_message.Message):
    __slots__ = ("keys", "sequences", "client_messages", "texts", "reasoning", "output_digests")
    KEYS_FIELD_NUMBER: _ClassVar[int]
    SEQUENCES_FIELD_NUMBER: _ClassVar[int]
    CLIENT_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    TEXTS_FIELD_NUMBER: _ClassVar[int]
    REASONING_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_DIGESTS_FIELD_NUMBER: _ClassVar[int]
    keys: _containers.RepeatedScalarFieldContainer[str]
    sequences: _containers.RepeatedScalarFieldContainer[int]
    client_messages: _containers.RepeatedScalarFieldContainer[int]
    texts: _containers.RepeatedScalarFieldContainer[str]
    reasoning: _containers.RepeatedScalarFieldContainer[bool]
    output_digests: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, keys: _Optional[_Iterable[str]] = ..., sequences: _Optional[_Iterable[int]] = ..., client_messages: _Optional[_Iterable[int]] = ..., texts: _Optional[_Iterable[str]] = ..., reasoning: _Optional[_Iterable[bool]] = ..., output_digests: _Optional[_Iterable[int]] = ...) -> None: ...

class SessionOutput(_message.Message):
    __slots__ = ("key", "sequence", "client_messages", "deltas", "events", "final", "status", "output_digest", "wire")
    KEY_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    CLIENT_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    DELTAS_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    FINAL_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_DIGEST_FIELD_NUMBER: _ClassVar[int]
    WIRE_FIELD_NUMBER: _ClassVar[int]
    key: str
    sequence: int
    client_messages: int
    deltas: _containers.RepeatedCompositeFieldContainer[Delta]
    events: _containers.RepeatedCompositeFieldContainer[Event]
    final: Final
    status: SessionStatus
    output_digest: int
    wire: bytes
    def __init__(self, key: _Optional[str] = ..., sequence: _Optional[int] = ..., client_messages: _Optional[int] = ..., deltas: _Optional[_Iterable[_Union[Delta, _Mapping]]] = ..., events: _Optional[_Iterable[_Union[Event, _Mapping]]] = ..., final: _Optional[_Union[Final, _Mapping]] = ..., status: _Optional[_Union[SessionStatus, _Mapping]] = ..., output_digest: _Optional[int] = ..., wire: _Optional[bytes] = ...) -> None: ...

class SessionStatus(_message.Message):
    __slots__ = ("code", "message", "wire")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    WIRE_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    wire: bytes
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ..., wire: _Optional[bytes] = ...) -> None: ...

class RenderRequest(_message.Message):
    __slots__ = ("model", "dialect", "request_json", "request_id", "response_id", "created", "chat_template", "return_prompt_text")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    DIALECT_FIELD_NUMBER: _ClassVar[int]
    REQUEST_JSON_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_ID_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    CHAT_TEMPLATE_FIELD_NUMBER: _ClassVar[int]
    RETURN_PROMPT_TEXT_FIELD_NUMBER: _ClassVar[int]
    model: str
    dialect: WireDialect
    request_json: bytes
    request_id: str
    response_id: str
    created: int
    chat_template: str
    return_prompt_text: bool
    def __init__(self, model: _Optional[str] = ..., dialect: _Optional[_Union[WireDialect, str]] = ..., request_json: _Optional[bytes] = ..., request_id: _Optional[str] = ..., response_id: _Optional[str] = ..., created: _Optional[int] = ..., chat_template: _Optional[str] = ..., return_prompt_text: _Optional[bool] = ...) -> None: ...

class RenderResponse(_message.Message):
    __slots__ = ("prompt_token_ids", "open", "sampling", "constraint", "prompt_tokens", "prompt_text")
    PROMPT_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    OPEN_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    CONSTRAINT_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TEXT_FIELD_NUMBER: _ClassVar[int]
    prompt_token_ids: _containers.RepeatedScalarFieldContainer[int]
    open: Open
    sampling: SamplingParams
    constraint: BuildConstraintResponse
    prompt_tokens: int
    prompt_text: str
    def __init__(self, prompt_token_ids: _Optional[_Iterable[int]] = ..., open: _Optional[_Union[Open, _Mapping]] = ..., sampling: _Optional[_Union[SamplingParams, _Mapping]] = ..., constraint: _Optional[_Union[BuildConstraintResponse, _Mapping]] = ..., prompt_tokens: _Optional[int] = ..., prompt_text: _Optional[str] = ...) -> None: ...

class SamplingParams(_message.Message):
    __slots__ = ("max_tokens", "temperature", "top_p", "top_k", "seed", "stop", "stop_token_ids", "logprobs", "top_logprobs", "n", "presence_penalty", "frequency_penalty")
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    TOP_P_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    STOP_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    TOP_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    N_FIELD_NUMBER: _ClassVar[int]
    PRESENCE_PENALTY_FIELD_NUMBER: _ClassVar[int]
    FREQUENCY_PENALTY_FIELD_NUMBER: _ClassVar[int]
    max_tokens: int
    temperature: float
    top_p: float
    top_k: int
    seed: int
    stop: _containers.RepeatedScalarFieldContainer[str]
    stop_token_ids: _containers.RepeatedScalarFieldContainer[int]
    logprobs: bool
    top_logprobs: int
    n: int
    presence_penalty: float
    frequency_penalty: float
    def __init__(self, max_tokens: _Optional[int] = ..., temperature: _Optional[float] = ..., top_p: _Optional[float] = ..., top_k: _Optional[int] = ..., seed: _Optional[int] = ..., stop: _Optional[_Iterable[str]] = ..., stop_token_ids: _Optional[_Iterable[int]] = ..., logprobs: _Optional[bool] = ..., top_logprobs: _Optional[int] = ..., n: _Optional[int] = ..., presence_penalty: _Optional[float] = ..., frequency_penalty: _Optional[float] = ...) -> None: ...
