"""The controller's settings: one object, one set of defaults, one check, three ways in.

:class:`ControllerConfig` holds everything ``controller/app.py`` needs besides the framework's own options
(the OpenFlow port and address are os-ken's ``--ofp-tcp-listen-port`` / ``--ofp-listen-host``).  Each
setting is declared once in :data:`SETTINGS`: its name, its environment variable, its default and its
check (the project's one field checker, :mod:`echelonflow.fields`), so a bad value from anywhere is one
line naming where it came from, e.g. ``ECHELON_API_PORT: must be an integer between 1 and 65535, got
'80a'``.  The app reads, lowest to highest precedence:

1. the defaults: the k=4 fat-tree at 10 Mbit/s, the API on 127.0.0.1:8181, the registry in
   /var/lib/echelon, so a plain ``osken-manager controller/app.py`` runs;
2. an ``[echelon]`` section of the manager's ``--config-file`` (how Ryu and os-ken apps take options)::

       [echelon]
       topology = leafspine
       topology_params = {"leaves": 4, "spines": 2, "hosts_per_leaf": 4}
       rate_mbps = 20
       api_port = 8282

3. ``ECHELON_*`` environment variables, which ``controller.launcher.ControllerProcess`` writes with
   :meth:`ControllerConfig.to_env` (the launcher also writes the topology as a spec file, ``topology_file``).

``echelon controller`` builds its config from command-line options made from the same table
(:func:`add_arguments`, :func:`from_arguments`) and hands it whole to the launcher.

Kept Python 3.9 compatible; no os-ken import (the app hands in its ``cfg`` module).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from controller import retention
from controller.auth import DEFAULT_TOKEN_PATH
from controller.store import DEFAULT_PATH as DEFAULT_STORE_PATH
from echelonflow.errors import UserError
from echelonflow.fields import Check, FieldError, boolean, integer, mapping, nullable, number, one_of, text
from echelonflow.fileio import JsonLimitError, loads_strict
from echelonflow.queues import DEFAULT_QUEUES, MAX_QUEUES
from echelonflow.topology import BUILDERS, Topology, TopologyError
from echelonflow.topology_spec import TopologySpec, load_spec

DEFAULT_METRICS_PORT = 9302  # Faucet's exporter port (controller.metrics serves it)
#: The start of the one line the app prints when it refuses to start (exit status 2: a bad setting,
#: spec, store or token file, or a store owned by another controller); the launcher passes it on.
START_ERROR_PREFIX = "echelon controller: error: "
OFF = "off"
#: Where the API's Unix socket goes when ``api_socket`` is empty (see :func:`default_socket_path`).
SOCKET_DIR = "/run/echelon"


def default_socket_path(api_port: int) -> str:
    """The API's Unix socket for an empty ``api_socket``: one per API port, so controllers side by side
    (each on its own port) never share one."""
    return os.path.join(SOCKET_DIR, f"controller-{api_port}.sock")


class ConfigError(UserError):
    """A setting that cannot be used; the message names the variable or option and the problem."""


def _topology_param(field: str, value: Any) -> Any:
    """A topology builder parameter: a number > 0, kept as given (``k`` must stay an integer)."""
    number(0.0, above=True)(field, value)
    return value


def _port_or_off(field: str, value: Any) -> int | None:
    return None if value in (None, OFF) else integer(1, 65535)(field, value)


@dataclass(frozen=True)
class Setting:
    """One declared setting: where it comes from and what it may be."""

    name: str
    env: str
    default: Any
    check: Check
    parse: Callable[[str], Any]
    help: str


def _json_object(raw: str) -> Any:
    """A JSON value by the project's strict reader (depth and number limits).  Text that does not even
    start like an object or array goes to the check as it is (which says what it must be); a bad object
    is a ValueError that :meth:`ControllerConfig.with_strings` names the setting in."""
    try:
        return loads_strict(raw)
    except JsonLimitError:
        raise
    except ValueError as exc:
        if raw.lstrip()[:1] not in ("{", "["):
            return raw
        raise ValueError(f"not valid JSON ({exc})") from None


def _number_text(kind: type) -> Callable[[str], Any]:
    def parse(raw: str) -> Any:
        try:
            return kind(raw)
        except ValueError:
            return raw  # the check then says what it must be

    return parse


_INT, _FLOAT = _number_text(int), _number_text(float)


def _bool_text(raw: str) -> Any:
    """``true``/``false`` (also 1/0, yes/no, on/off), else the text for the check to name."""
    lowered = raw.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    return raw
SETTINGS = (
    Setting("topology_file", "ECHELON_TOPOLOGY", None, nullable(text()), str,
            "topology spec JSON file (the launcher writes one); overrides the three settings below"),
    Setting("topology", "ECHELON_TOPOLOGY_KIND", "fattree", one_of(*BUILDERS), str, "topology kind"),
    Setting("topology_params", "ECHELON_TOPOLOGY_PARAMS", {"k": 4}, mapping(item=_topology_param),
            _json_object, 'the kind\'s parameters as a JSON object, e.g. {"k": 4}'),
    Setting("rate_mbps", "ECHELON_RATE_MBPS", 10.0, number(0.0, above=True), _FLOAT, "link rate in Mbit/s"),
    Setting("queues", "ECHELON_QUEUES", DEFAULT_QUEUES, integer(2, MAX_QUEUES), _INT,
            "priority classes per port, as the fabric"),
    Setting("route_idle_s", "ECHELON_ROUTE_IDLE_S", 30, integer(1, 65535), _INT,
            "idle timeout of per-host-pair routes"),
    Setting("enforce_idle_s", "ECHELON_ENFORCE_IDLE_S", 60, integer(1, 65535), _INT,
            "idle timeout of enforced flows' rules (a flow idle that long on its first switch is forgotten)"),
    Setting("meter_burst_s", "ECHELON_METER_BURST_S", 0.2, number(0.0, 10.0, above=True), _FLOAT,
            "a meter's bucket in seconds of its rate"),
    Setting("meter_min_burst_kbit", "ECHELON_METER_MIN_BURST_KBIT", 1000, integer(1, 10**7), _INT,
            "smallest meter bucket"),
    Setting("store", "ECHELON_STORE", DEFAULT_STORE_PATH, text(), str, "registry SQLite file"),
    Setting("token_file", "ECHELON_TOKEN_FILE", DEFAULT_TOKEN_PATH, text(), str, "API bearer token file"),
    Setting("api_host", "ECHELON_API_HOST", "127.0.0.1", text(), str, "API TCP address"),
    Setting("api_port", "ECHELON_API_PORT", 8181, integer(1, 65535), _INT, "API TCP port"),
    Setting("api_socket", "ECHELON_API_SOCKET", "", text(nonempty=False), str,
            "API Unix socket (empty: /run/echelon/controller-<api_port>.sock)"),
    Setting("min_rate_bps", "ECHELON_MIN_RATE_BPS", 8000.0, number(0.0, 1e12), _FLOAT,
            "allocations below this rate count as paused: last class, no meter, unpaced"),
    Setting("hold_paused", "ECHELON_HOLD_PAUSED", False, boolean(), _bool_text,
            "agents hold paused flows (send nothing): a paused flow keeps its class, idle channels sit in "
            "class 1, so no flow is raised out of a class it still has packets in"),
    Setting("fixed_class", "ECHELON_FIXED_CLASS", False, boolean(), _bool_text,
            "a flow keeps the class of its first allocation until it ends (only its rate changes), so its "
            "newer packets never overtake older ones queued in another class"),
    Setting("check_decisions", "ECHELON_CHECK_DECISIONS", False, boolean(), _bool_text,
            "check every decision against the invariants the simulator checks (rates finite and >= 0, no "
            "link over capacity, a sound ranking) and leave enforcement as it was on a failed check "
            "(a debugging aid: it costs a walk over every active flow's path per pass)"),
    Setting("interval_s", "ECHELON_INTERVAL_S", 0.5, number(0.0, 3600.0, above=True), _FLOAT,
            "reschedule interval"),
    Setting("stats_interval_s", "ECHELON_STATS_INTERVAL_S", 1.0, number(0.0, 3600.0), _FLOAT,
            "switch counter poll interval (0: off)"),
    Setting("retain_done_jobs", "ECHELON_RETAIN_DONE_JOBS", retention.MEMORY_JOBS, integer(0, 10**7), _INT,
            "done (finished or aborted) jobs kept in memory at most; the longest done leave first"),
    Setting("retain_done_s", "ECHELON_RETAIN_DONE_S", retention.MEMORY_S, number(0.0, 365 * 86400.0), _FLOAT,
            "seconds a done job stays in memory (then it is read from the store)"),
    Setting("archive_done_s", "ECHELON_ARCHIVE_DONE_S", retention.STORE_S, number(0.0, 3650 * 86400.0),
            _FLOAT, "seconds a done job stays in the store after it was done (then it is deleted)"),
    Setting("metrics_host", "ECHELON_METRICS_HOST", "127.0.0.1", text(), str, "Prometheus /metrics address"),
    Setting("metrics_port", "ECHELON_METRICS_PORT", DEFAULT_METRICS_PORT, _port_or_off,
            lambda raw: raw if raw == OFF else _INT(raw), "Prometheus /metrics port ('off': none)"),
)
_BY_NAME = {s.name: s for s in SETTINGS}
#: Every setting's default, written once (in :data:`SETTINGS`); :class:`ControllerConfig` reads them.
DEFAULTS: Mapping[str, Any] = {s.name: s.default for s in SETTINGS}


@dataclass(frozen=True)
class ControllerConfig:
    """Every setting of the controller app (see :data:`SETTINGS` for what each one is; the defaults are
    :data:`DEFAULTS`, read from there).

    Every component the app builds takes this one object and reads its own settings from it (the
    :class:`~controller.routing.Router`, the :class:`~controller.enforcement.Enforcer`, the
    :class:`~controller.service.SchedulingService`), so a default is written once, in :data:`SETTINGS`.
    """

    topology_file: str | None = DEFAULTS["topology_file"]
    topology: str = DEFAULTS["topology"]
    topology_params: Mapping[str, int] = field(default_factory=lambda: dict(DEFAULTS["topology_params"]))
    rate_mbps: float = DEFAULTS["rate_mbps"]
    queues: int = DEFAULTS["queues"]
    route_idle_s: int = DEFAULTS["route_idle_s"]
    enforce_idle_s: int = DEFAULTS["enforce_idle_s"]
    meter_burst_s: float = DEFAULTS["meter_burst_s"]
    meter_min_burst_kbit: int = DEFAULTS["meter_min_burst_kbit"]
    store: str = DEFAULTS["store"]
    token_file: str = DEFAULTS["token_file"]
    api_host: str = DEFAULTS["api_host"]
    api_port: int = DEFAULTS["api_port"]
    api_socket: str = DEFAULTS["api_socket"]
    min_rate_bps: float = DEFAULTS["min_rate_bps"]
    hold_paused: bool = DEFAULTS["hold_paused"]
    fixed_class: bool = DEFAULTS["fixed_class"]
    check_decisions: bool = DEFAULTS["check_decisions"]
    interval_s: float = DEFAULTS["interval_s"]
    stats_interval_s: float = DEFAULTS["stats_interval_s"]
    retain_done_jobs: int = DEFAULTS["retain_done_jobs"]
    retain_done_s: float = DEFAULTS["retain_done_s"]
    archive_done_s: float = DEFAULTS["archive_done_s"]
    metrics_host: str = DEFAULTS["metrics_host"]
    metrics_port: int | None = DEFAULTS["metrics_port"]

    def __post_init__(self) -> None:
        if self.topology_params is None:
            object.__setattr__(self, "topology_params", dict(DEFAULTS["topology_params"]))
        for spec in SETTINGS:
            try:
                value = spec.check(spec.name, getattr(self, spec.name))
            except FieldError as err:
                raise ConfigError(str(err)) from None
            object.__setattr__(self, spec.name, value)

    # ------------------------------------------------------------------ sources
    def with_strings(self, values: Mapping[str, str], label: Callable[[Setting], str]) -> ControllerConfig:
        """This config with the given settings replaced by parsed strings; errors name ``label(setting)``."""
        changes = {}
        for spec in SETTINGS:
            raw = values.get(spec.name)
            if raw is None:
                continue
            try:
                value = None if spec.name == "topology_file" and raw == "" else spec.parse(raw)
            except ValueError as err:  # a parse that cannot hand the raw text on to the check (JSON)
                raise ConfigError(f"{label(spec)}: {err}") from None
            try:
                changes[spec.name] = spec.check(label(spec), value)
            except FieldError as err:
                raise ConfigError(str(err)) from None
        return replace(self, **changes)

    @classmethod
    def load(cls, environ: Mapping[str, str], options: Any = None) -> ControllerConfig:
        """Defaults, then the ``[echelon]`` options of a config file (``options``: the registered oslo
        group, or None), then the ``ECHELON_*`` environment."""
        config = cls()
        if options is not None:
            from_file = {s.name: getattr(options, s.name) for s in SETTINGS
                         if getattr(options, s.name, None) is not None}
            config = config.with_strings(from_file, lambda s: f"[echelon] {s.name}")
        from_env = {s.name: environ[s.env] for s in SETTINGS if s.env in environ}
        return config.with_strings(from_env, lambda s: s.env)

    def to_env(self) -> dict[str, str]:
        """The environment that makes the app read exactly this config back (:meth:`load`)."""
        out = {}
        for spec in SETTINGS:
            value = getattr(self, spec.name)
            if value is None:
                out[spec.env] = OFF if spec.name == "metrics_port" else ""
            elif isinstance(value, Mapping):
                out[spec.env] = json.dumps(dict(value), sort_keys=True)
            else:
                out[spec.env] = repr(value) if isinstance(value, float) else str(value)
        return out

    # ------------------------------------------------------------------ what the app builds from it
    def build_topology(self) -> Topology:
        """The topology: the spec file if one is set, else kind, parameters and rate."""
        if self.topology_file:
            return load_spec(self.topology_file)
        try:
            return TopologySpec(self.topology, self.rate_mbps * 1e6, dict(self.topology_params)).build()
        except TopologyError as exc:
            raise ConfigError(f"topology {self.topology} {dict(self.topology_params)}: {exc}") from None

    @property
    def socket_path(self) -> str | None:
        return self.api_socket or None

    @property
    def retention(self) -> retention.Retention:
        """How long done jobs stay in memory and in the store (``controller.retention``)."""
        return retention.Retention(self.retain_done_jobs, self.retain_done_s, self.archive_done_s)


def oslo_options(cfg: Any) -> list[Any]:
    """The settings as oslo.config options (all strings, parsed and checked like the environment), for
    ``cfg.CONF.register_opts(oslo_options(cfg), group="echelon")`` in the app."""
    return [cfg.StrOpt(spec.name, default=None, help=f"{spec.help} (default {_shown(spec)})")
            for spec in SETTINGS]


def add_arguments(parser: Any, names: Iterable[str]) -> None:
    """The settings ``names`` as command-line options (``api_port`` -> ``--api-port``), for
    :func:`from_arguments`: strings, parsed and checked as the environment's are, so an option is
    declared once, in :data:`SETTINGS`, and refused with the same one line naming it."""
    for name in names:
        spec = _BY_NAME[name]
        parser.add_argument(_option(spec), dest=_dest(spec), default=None, metavar=name.upper(),
                            help=f"{spec.help} (default {_shown(spec)})".replace("%", "%%"))


def from_arguments(args: Any, names: Iterable[str],
                   base: ControllerConfig | None = None) -> ControllerConfig:
    """``base`` (default: the defaults) with the options :func:`add_arguments` added for ``names`` that
    were given; a bad value is a :class:`ConfigError` naming the option."""
    given = {name: getattr(args, _dest(_BY_NAME[name])) for name in names}
    given = {name: value for name, value in given.items() if value is not None}
    return (base or ControllerConfig()).with_strings(given, _option)


def _option(spec: Setting) -> str:
    return "--" + spec.name.replace("_", "-")


def _dest(spec: Setting) -> str:
    return "setting_" + spec.name  # apart from options of the same name (the topology's --rate-mbps)


def _shown(spec: Setting) -> str:
    value = spec.default
    return json.dumps(value) if isinstance(value, dict) else str(value)
