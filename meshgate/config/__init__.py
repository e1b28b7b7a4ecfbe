"""The node's TOML configuration, with dotted-key overrides from the command line.

``schema`` is the framework (typed fields with parsers, errors naming the dotted
key); ``node``, ``mesh``, ``metrics``, ``journeys``, ``doctor``, ``ha`` and ``vhosts`` hold the
tables; ``loader`` reads a file."""

from meshgate.config.doctor import DoctorConfig
from meshgate.config.ha import HA_MODES, HaConfig, ReplicationTlsConfig
from meshgate.config.journeys import JourneysConfig
from meshgate.config.loader import load_config, parse_override
from meshgate.config.mesh import LOAD_BALANCING_MODES, DiscoveryConfig, MeshConfig, RedistributionOverride
from meshgate.config.metrics import MetricsConfig
from meshgate.config.node import (
    AuthorizationEntry,
    BrokerConfig,
    NodeConfig,
    SecurityConfig,
    StompConfig,
    StoreConfig,
    TlsConfig,
    UserConfig,
)
from meshgate.config.schema import ConfigError, parse_address, parse_size
from meshgate.config.vhosts import VhostConfig, VhostsConfig

__all__ = [
    "HA_MODES",
    "LOAD_BALANCING_MODES",
    "AuthorizationEntry",
    "BrokerConfig",
    "ConfigError",
    "DiscoveryConfig",
    "DoctorConfig",
    "HaConfig",
    "JourneysConfig",
    "MeshConfig",
    "MetricsConfig",
    "NodeConfig",
    "RedistributionOverride",
    "ReplicationTlsConfig",
    "SecurityConfig",
    "StompConfig",
    "StoreConfig",
    "TlsConfig",
    "UserConfig",
    "VhostConfig",
    "VhostsConfig",
    "load_config",
    "parse_address",
    "parse_override",
    "parse_size",
]
