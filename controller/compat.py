"""The one module that imports os-ken or Ryu, so every other controller module is framework-neutral.

os-ken (OpenStack's maintained fork, 3.1.x ships ``osken-manager``) is tried first: it is what runs on
this project's Python 3.11 machines.  Ryu 4.34 (``ryu-manager``) is the fallback for the Python 3.9
kernel-datapath VM, where os-ken's dependencies may be missing.  The two have the same API under
different package names, and os-ken renamed ``RyuApp`` to ``OSKenApp`` without an alias, hence ``BaseApp``.
"""

from __future__ import annotations

try:
    from os_ken import cfg
    from os_ken.base.app_manager import OSKenApp as BaseApp
    from os_ken.base.app_manager import lookup_service_brick
    from os_ken.controller import ofp_event
    from os_ken.controller.handler import (
        CONFIG_DISPATCHER,
        DEAD_DISPATCHER,
        MAIN_DISPATCHER,
        set_ev_cls,
    )
    from os_ken.lib import hub
    from os_ken.lib.packet import arp, ether_types, ethernet, ipv4, packet, tcp, udp
    from os_ken.ofproto import ofproto_v1_3, ofproto_v1_3_parser

    FRAMEWORK = "os_ken"
    MANAGER = "osken-manager"
except ImportError:  # pragma: no cover - exercised on the Ryu VM only
    from ryu import cfg  # type: ignore[no-redef]
    from ryu.base.app_manager import RyuApp as BaseApp  # type: ignore[no-redef]
    from ryu.base.app_manager import lookup_service_brick  # type: ignore[no-redef]
    from ryu.controller import ofp_event  # type: ignore[no-redef]
    from ryu.controller.handler import (  # type: ignore[no-redef]
        CONFIG_DISPATCHER,
        DEAD_DISPATCHER,
        MAIN_DISPATCHER,
        set_ev_cls,
    )
    from ryu.lib import hub  # type: ignore[no-redef]
    from ryu.lib.packet import arp, ether_types, ethernet, ipv4, packet, tcp, udp  # type: ignore[no-redef]
    from ryu.ofproto import ofproto_v1_3, ofproto_v1_3_parser  # type: ignore[no-redef]

    FRAMEWORK = "ryu"
    MANAGER = "ryu-manager"

__all__ = [
    "BaseApp",
    "CONFIG_DISPATCHER",
    "DEAD_DISPATCHER",
    "FRAMEWORK",
    "MAIN_DISPATCHER",
    "MANAGER",
    "arp",
    "cfg",
    "ether_types",
    "ethernet",
    "hub",
    "ipv4",
    "lookup_service_brick",
    "ofp_event",
    "ofproto_v1_3",
    "ofproto_v1_3_parser",
    "packet",
    "set_ev_cls",
    "tcp",
    "udp",
]
