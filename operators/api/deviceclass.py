"""DeviceClass: a kind of device that claims ask for (cluster-scoped)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from operators.api import limits
from operators.api.base import KubeModel
from operators.api.common import (
    API_VERSION,
    DeviceClassConfiguration,
    DeviceSelectors,
    empty_tuple,
)
from operators.api.meta import ObjectMeta


class DeviceClassSpec(KubeModel):
    """Selectors and configuration shared by every request that names the class."""

    selectors: DeviceSelectors = empty_tuple()
    """Criteria every device of the class must meet."""
    config: Annotated[
        tuple[DeviceClassConfiguration, ...], Field(max_length=limits.DEVICE_CONFIG_MAX_SIZE)
    ] = empty_tuple()
    """Configuration for devices allocated through this class."""
    extended_resource_name: str | None = None
    """Extended resource name (for example example.com/gpu) that pods may request to get a device of this class."""


class DeviceClass(KubeModel):
    """A kind of device that claims can ask for (cluster-scoped)."""

    api_version: str = API_VERSION
    """resource.dralloc.dev/v1."""
    kind: Literal["DeviceClass"] = "DeviceClass"
    """DeviceClass."""
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    """Standard object metadata."""
    spec: DeviceClassSpec = Field(default_factory=DeviceClassSpec)
    """What the class selects and how its devices are configured."""
