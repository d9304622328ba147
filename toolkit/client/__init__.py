"""Clients for a deployed model: sync (`TritonClient`), asyncio (`AsyncTritonClient`).

Both speak HTTP (Triton's generate / generate_stream extension, or the infer API) and gRPC
(infer, or the bidirectional stream for decoupled models), and return `GenerationResponse`
(text, client-side chunk timestamps, acceptance stats, server timestamps). Failures are
`ClientError` subclasses (ServerUnreachable, ConnectionLost, ResponseTimeout) with a hint.
"""

from toolkit.client.aio import AsyncGenerationStream, AsyncTritonClient
from toolkit.client.errors import ClientError, ConnectionLost, ResponseTimeout, ServerUnreachable
from toolkit.client.sync import GenerationStream, TritonClient
from toolkit.client.types import GenerationChunk, GenerationRequest, GenerationResponse, ModelInfo

__all__ = [
    "AsyncGenerationStream",
    "AsyncTritonClient",
    "ClientError",
    "ConnectionLost",
    "GenerationChunk",
    "GenerationRequest",
    "GenerationResponse",
    "GenerationStream",
    "ModelInfo",
    "ResponseTimeout",
    "ServerUnreachable",
    "TritonClient",
]
