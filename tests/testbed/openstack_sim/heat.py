"""A small Heat engine: enough of HOT for the stacks Tacker's v2 OpenStack driver makes.

What it does
    * Intrinsics ``get_param`` (with a path into json parameters), ``get_resource``,
      ``get_attr``, ``str_replace``, ``list_join``; ``depends_on``.
    * Resources are created in dependency order and deleted in reverse order.
    * A resource whose type names a file of the stack (``workerNode.yaml``) is a nested
      stack; ``OS::Heat::AutoScalingGroup`` is a group stack whose members are nested
      stacks of its ``resource`` definition. On update a group grows, shrinks (members
      marked unhealthy go first, then the oldest) and replaces unhealthy members.
    * A resource marked unhealthy (``mark_unhealthy``) is replaced on the next update of
      any stack above it; a replaced server keeps its ports, so keeps its addresses.
    * ``OS::Heat::ScalingPolicy`` (what Tacker's v1 SCALE signals): a signal moves its
      group's size by ``scaling_adjustment`` within min/max, as Heat does; the group keeps
      that size through later stack updates until the template's ``desired_capacity``
      itself changes. Every resource records events (create, update, delete, signal),
      newest first in the API, which v1 SCALE compares before and after its signal.
    * ``OS::Neutron::Port`` takes an address from an :class:`AddressPool`: ports that a
      server uses take one from the server pool, others (a VIP) from the VIP pool;
      ``OS::Neutron::FloatingIP`` takes one from the floating pool.
    * ``OS::Cinder::Volume`` and ``OS::Cinder::VolumeAttachment``, and a server's
      ``block_device_mapping_v2``: see :mod:`tests.testbed.openstack_sim.volumes` (what is
      simulated of a volume, and its loop device on the test hosts).

What it leaves out
    Conditions, outputs, environments, most intrinsics, rollback, real asynchrony
    (operations complete before the API call returns), and every resource property
    that the engine does not need to hand out an id or an address.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import secrets
import string
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import yaml

from .volumes import VolumeRegistry

__all__ = ["AddressPool", "HeatEngine", "HeatError", "Resource", "Stack"]

_NAME_CHARS = string.ascii_lowercase + string.digits


class HeatError(Exception):
    """A stack operation failed; the message becomes ``stack_status_reason``."""


def _short_id(n: int = 12) -> str:
    return "".join(secrets.choice(_NAME_CHARS) for _ in range(n))


def _json_safe(value: Any) -> Any:
    """YAML turns ``2013-05-23`` into a date; Heat gives templates back with strings."""
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    if isinstance(value, dt.date | dt.datetime):
        return value.isoformat()
    return value


def parse_template(text_or_dict: str | dict[str, Any]) -> dict[str, Any]:
    if isinstance(text_or_dict, dict):
        return _json_safe(text_or_dict)  # type: ignore[no-any-return]
    loaded = yaml.safe_load(text_or_dict) or {}
    if not isinstance(loaded, dict):
        raise HeatError("template is not a mapping")
    return _json_safe(loaded)  # type: ignore[no-any-return]


class AddressPool:
    """IPv4 addresses handed out first-free in the order given, and returned on delete."""

    def __init__(self, name: str, addresses: Iterable[str]) -> None:
        self.name = name
        self._free = [str(ipaddress.IPv4Address(a)) for a in addresses]
        self._all = list(self._free)
        self._used: set[str] = set()

    @classmethod
    def parse(cls, name: str, spec: str) -> AddressPool:
        """``10.77.0.11-10.77.0.40``, ``10.77.0.11,10.77.0.12`` or a CIDR."""
        addrs: list[str] = []
        for part in (p.strip() for p in spec.split(",") if p.strip()):
            if "-" in part:
                lo, hi = (ipaddress.IPv4Address(x.strip()) for x in part.split("-", 1))
                addrs += [str(ipaddress.IPv4Address(i)) for i in range(int(lo), int(hi) + 1)]
            elif "/" in part:
                addrs += [str(h) for h in ipaddress.IPv4Network(part, strict=False).hosts()]
            else:
                addrs.append(str(ipaddress.IPv4Address(part)))
        return cls(name, addrs)

    @property
    def addresses(self) -> list[str]:
        return list(self._all)

    def take(self) -> str:
        for addr in self._all:
            if addr not in self._used:
                self._used.add(addr)
                return addr
        raise HeatError(f"IP address pool {self.name!r} exhausted ({len(self._all)} addresses)")

    def give_back(self, addr: str) -> None:
        self._used.discard(addr)


@dataclass
class Resource:
    name: str
    type: str
    definition: dict[str, Any]
    stack: Stack
    physical_id: str = ""
    status: str = "INIT_COMPLETE"
    status_reason: str = ""
    creation_time: str = ""
    updated_time: str | None = None
    unhealthy: bool = False
    properties: dict[str, Any] = field(default_factory=dict)
    attributes: dict[str, Any] = field(default_factory=dict)
    nested: Stack | None = None
    events: list[dict[str, Any]] = field(default_factory=list)
    # AutoScalingGroup: the template's capacity last applied, and a size a policy set since
    capacity_applied: int | None = None
    capacity_signalled: int | None = None

    def depends(self) -> set[str]:
        return _deps(self.definition)


@dataclass
class Stack:
    id: str
    name: str
    template: dict[str, Any]
    files: dict[str, str]
    params: dict[str, Any]
    parent: tuple[Stack, str] | None = None
    status: str = "CREATE_IN_PROGRESS"
    status_reason: str = ""
    creation_time: str = ""
    updated_time: str | None = None
    timeout_mins: int | None = None
    disable_rollback: bool = True
    resources: dict[str, Resource] = field(default_factory=dict)

    @property
    def ident(self) -> str:
        return f"{self.name}/{self.id}"

    def nesting_depth(self) -> int:
        depth, s = 0, self
        while s.parent is not None:
            depth, s = depth + 1, s.parent[0]
        return depth

    def param_values(self) -> dict[str, Any]:
        """Parameter values as Heat shows them (json ones as JSON text)."""
        out: dict[str, Any] = {}
        for name, spec in (self.template.get("parameters") or {}).items():
            value = self.params.get(name, (spec or {}).get("default"))
            if (spec or {}).get("type") == "json" and not isinstance(value, str):
                value = json.dumps(value)
            out[name] = value
        out["OS::stack_id"] = self.id
        out["OS::stack_name"] = self.name
        return out


def _refs(node: Any) -> Iterable[str]:
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "get_resource" and isinstance(v, str):
                yield v
            elif k == "get_attr" and isinstance(v, list) and v:
                yield str(v[0])
            else:
                yield from _refs(v)
    elif isinstance(node, list):
        for v in node:
            yield from _refs(v)


def _deps(definition: dict[str, Any]) -> set[str]:
    names = set(_refs(definition.get("properties", {})))
    dep = definition.get("depends_on")
    if isinstance(dep, str):
        names.add(dep)
    elif isinstance(dep, list):
        names.update(str(d) for d in dep)
    return names


def _order(resources: dict[str, dict[str, Any]]) -> list[str]:
    """Names in dependency order; among ready ones, template order (so addresses follow
    the template: in the sample package the masters take the pool's first addresses)."""
    deps = {n: {d for d in _deps(spec or {}) if d in resources} for n, spec in resources.items()}
    done: list[str] = []
    while len(done) < len(deps):
        ready = next((n for n, d in deps.items() if n not in done and d <= set(done)), None)
        if ready is None:
            raise HeatError(f"circular dependency between {sorted(set(deps) - set(done))}")
        done.append(ready)
    return done


class HeatEngine:
    """Stacks, their resources and the servers/ports they stand for.

    Arguments:
        server_pool: addresses for ports that a server uses.
        vip_pool: addresses for ports no server uses (a cluster VIP).
        floating_pool: addresses for ``OS::Neutron::FloatingIP``.
        compute_hosts: ``OS-EXT-SRV-ATTR:host`` values, handed out round robin; members
            of an anti-affinity server group each on another while hosts last.
        zone: the availability zone of every server.
        clock: returns "now" (UTC); tests may replace it.
        volumes: the Cinder volumes (loop devices behind them, or none).
    """

    def __init__(
        self,
        *,
        server_pool: AddressPool,
        vip_pool: AddressPool,
        floating_pool: AddressPool,
        compute_hosts: list[str],
        zone: str = "nova",
        clock: Callable[[], dt.datetime] | None = None,
        volumes: VolumeRegistry | None = None,
    ) -> None:
        self.volumes = volumes or VolumeRegistry()
        self.server_pool = server_pool
        self.vip_pool = vip_pool
        self.floating_pool = floating_pool
        self.compute_hosts = compute_hosts
        self.zone = zone
        self._clock = clock or (lambda: dt.datetime.now(dt.UTC))
        self._last_stamp = dt.datetime.min.replace(tzinfo=dt.UTC)
        self._host_turn = 0
        self.stacks: dict[str, Stack] = {}  # by id, live ones
        self.deleted: dict[str, Stack] = {}  # by id, DELETE_COMPLETE
        self.servers: dict[str, dict[str, Any]] = {}
        self.ports: dict[str, dict[str, Any]] = {}
        self.server_groups: dict[str, dict[str, Any]] = {}
        self._events = 0

    # ---- time -------------------------------------------------------------------------

    def _stamp(self) -> str:
        # Heat's times have whole seconds, and Tacker sorts VNFCs newest first by them:
        # every operation gets a second of its own, so a scale-out's members sort first.
        now = self._clock().replace(microsecond=0)
        if now <= self._last_stamp:
            now = self._last_stamp + dt.timedelta(seconds=1)
        self._last_stamp = now
        return now.strftime("%Y-%m-%dT%H:%M:%SZ")

    # ---- lookup -----------------------------------------------------------------------

    def find(self, ident: str) -> Stack | None:
        """A live stack by id, name or ``name/id``; a deleted one only by id."""
        name, _, sid = ident.partition("/")
        if sid:
            stack = self.stacks.get(sid) or self.deleted.get(sid)
            return stack if stack is not None and stack.name == name else None
        if name in self.stacks:
            return self.stacks[name]
        if name in self.deleted:
            return self.deleted[name]
        for stack in self.stacks.values():
            if stack.name == name:
                return stack
        return None

    def top_level(self) -> list[Stack]:
        return [s for s in self.stacks.values() if s.parent is None]

    # ---- API operations ---------------------------------------------------------------

    def create_stack(
        self,
        name: str,
        template: str | dict[str, Any],
        files: dict[str, Any] | None,
        params: dict[str, Any] | None,
        *,
        timeout_mins: int | None = None,
        disable_rollback: bool = True,
    ) -> Stack:
        if any(s.name == name for s in self.top_level()):
            raise HeatError(f"The Stack ({name}) already exists.")
        stamp = self._stamp()
        stack = self._new_stack(name, parse_template(template), _files(files), params or {}, stamp)
        stack.timeout_mins = timeout_mins
        stack.disable_rollback = disable_rollback
        self._converge_as("CREATE", stack, stamp)
        return stack

    def update_stack(
        self,
        stack: Stack,
        *,
        template: str | dict[str, Any] | None,
        files: dict[str, Any] | None,
        params: dict[str, Any] | None,
        existing: bool,
    ) -> None:
        stamp = self._stamp()
        if template is not None:
            stack.template = parse_template(template)
        if files is not None:
            stack.files = {**stack.files, **_files(files)} if existing else _files(files)
        stack.params = {**stack.params, **(params or {})} if existing else dict(params or {})
        stack.updated_time = stamp
        stack.status = "UPDATE_IN_PROGRESS"
        self._converge_as("UPDATE", stack, stamp)

    def delete_stack(self, stack: Stack) -> None:
        for rname in reversed(list(stack.resources)):
            self._delete_resource(stack.resources.pop(rname))
        stack.status, stack.status_reason = "DELETE_COMPLETE", "Stack DELETE completed"
        self.stacks.pop(stack.id, None)
        self.deleted[stack.id] = stack

    def signal(self, stack: Stack, resource_name: str) -> None:
        """Signal a resource: a ``OS::Heat::ScalingPolicy`` resizes its group now.

        Raises:
            KeyError: no such resource.
            HeatError: not a resource that takes signals, or its group is gone.
        """
        res = stack.resources[resource_name]
        if res.type != "OS::Heat::ScalingPolicy":
            raise HeatError(f"{resource_name} ({res.type}) does not take signals")
        stamp = self._stamp()
        group_id = res.properties.get("auto_scaling_group_id")
        group = next(
            (r for r in stack.resources.values() if r.physical_id == group_id and r.nested),
            None,
        )
        if group is None:
            raise HeatError(f"{resource_name}: its group {group_id} is not in {stack.name}")
        lo = int(group.properties.get("min_size") or 0)
        hi = int(group.properties.get("max_size") or 0) or 1 << 30
        size = len(group.nested.resources) if group.nested else 0
        step = int(res.properties.get("scaling_adjustment") or 0)
        group.capacity_signalled = min(hi, max(lo, size + step))
        self.event(res, "SIGNAL_IN_PROGRESS", "signal received", stamp)
        self._update_group(group, stamp)
        group.updated_time = stamp
        group.status, group.status_reason = "UPDATE_COMPLETE", "state changed"
        self.event(group, "UPDATE_COMPLETE", "state changed", stamp)
        self.event(res, "SIGNAL_COMPLETE", f"adjusted {group.name} by {step}", stamp)

    def event(self, res: Resource, status: str, reason: str, stamp: str | None = None) -> None:
        """Record an event of ``res`` (the API shows a resource's events newest first)."""
        self._events += 1
        res.events.append(
            {
                "seq": self._events,  # order among events of the same second
                "id": str(uuid.uuid4()),
                "event_time": stamp or self._stamp(),
                "resource_name": res.name,
                "logical_resource_id": res.name,
                "physical_resource_id": res.physical_id,
                "resource_status": status,
                "resource_status_reason": reason,
            }
        )

    def mark_unhealthy(
        self, stack: Stack, resource_name: str, unhealthy: bool, reason: str
    ) -> None:
        res = stack.resources.get(resource_name)
        if res is None:
            raise KeyError(resource_name)
        res.unhealthy = unhealthy
        if unhealthy:
            res.status, res.status_reason = "CHECK_FAILED", reason or "marked unhealthy"
        else:
            res.status, res.status_reason = "CHECK_COMPLETE", reason

    # ---- the engine -------------------------------------------------------------------

    def _new_stack(
        self,
        name: str,
        template: dict[str, Any],
        files: dict[str, str],
        params: dict[str, Any],
        stamp: str,
        parent: tuple[Stack, str] | None = None,
    ) -> Stack:
        stack = Stack(str(uuid.uuid4()), name, template, files, params, parent=parent)
        stack.creation_time = stamp
        self.stacks[stack.id] = stack
        return stack

    def _converge_as(self, action: str, stack: Stack, stamp: str) -> None:
        """Converge ``stack`` and set the status Heat shows after ``action`` (CREATE, UPDATE)."""
        try:
            self._converge(stack, stamp)
        except HeatError as exc:
            stack.status, stack.status_reason = (
                f"{action}_FAILED",
                f"Resource {action} failed: {exc}",
            )
        else:
            stack.status, stack.status_reason = f"{action}_COMPLETE", f"Stack {action} completed"

    def _converge(self, stack: Stack, stamp: str) -> None:
        """Make the stack's resources match its template (create, update, replace, delete)."""
        defs: dict[str, dict[str, Any]] = {
            n: (d or {}) for n, d in (stack.template.get("resources") or {}).items()
        }
        for rname in [n for n in reversed(list(stack.resources)) if n not in defs]:
            self._delete_resource(stack.resources.pop(rname))
        server_ports = _ports_used_by_servers(defs)
        for rname in _order(defs):
            rdef = defs[rname]
            res = stack.resources.get(rname)
            if res is not None and (res.type != rdef.get("type") or self._needs_replace(res)):
                self._delete_resource(res)
                del stack.resources[rname]
                res = None
            if res is None:
                res = Resource(rname, str(rdef.get("type")), rdef, stack)
                stack.resources[rname] = res
                res.creation_time = stamp
                res.properties = self._resolve(stack, rdef.get("properties") or {})
                self._create_resource(res, stamp, in_server_pool=rname in server_ports)
            else:
                res.definition = rdef
                res.properties = self._resolve(stack, rdef.get("properties") or {})
                self._update_resource(res, stamp)

    def _needs_replace(self, res: Resource) -> bool:
        # An unhealthy leaf is replaced; an unhealthy nested stack too (a group member
        # marked by a scale-in is removed by the group before it gets here).
        return res.unhealthy

    def _resolve(self, stack: Stack, node: Any) -> Any:
        if isinstance(node, list):
            return [self._resolve(stack, v) for v in node]
        if not isinstance(node, dict):
            return node
        if len(node) == 1:
            ((fn, arg),) = node.items()
            if fn == "get_param":
                return self._get_param(stack, arg)
            if fn == "get_resource":
                res = stack.resources.get(str(arg))
                if res is None:
                    raise HeatError(f"get_resource: {arg} is not a resource of {stack.name}")
                return res.physical_id
            if fn == "get_attr":
                return self._get_attr(stack, self._resolve(stack, arg))
            if fn == "str_replace":
                text = str(self._resolve(stack, arg.get("template", "")))
                for k, v in (self._resolve(stack, arg.get("params") or {})).items():
                    text = text.replace(str(k), str(v))
                return text
            if fn == "list_join":
                sep, items = arg[0], self._resolve(stack, arg[1])
                return str(sep).join(str(i) for i in items)
        return {k: self._resolve(stack, v) for k, v in node.items()}

    def _get_param(self, stack: Stack, arg: Any) -> Any:
        path = [arg] if isinstance(arg, str) else list(arg)
        name = str(path[0])
        spec = (stack.template.get("parameters") or {}).get(name)
        if spec is None:
            raise HeatError(f"get_param: parameter {name} is not declared in {stack.name}")
        value = stack.params.get(name, (spec or {}).get("default"))
        if isinstance(value, str) and (spec or {}).get("type") == "json":
            value = json.loads(value)
        return _walk(value, path[1:])

    def _get_attr(self, stack: Stack, arg: list[Any]) -> Any:
        res = stack.resources.get(str(arg[0]))
        if res is None:
            raise HeatError(f"get_attr: {arg[0]} is not a resource of {stack.name}")
        value: Any = res.attributes.get(str(arg[1])) if len(arg) > 1 else res.attributes
        return _walk(value, arg[2:])

    def _create_resource(self, res: Resource, stamp: str, *, in_server_pool: bool) -> None:
        res.status = "CREATE_IN_PROGRESS"
        rtype, props = res.type, res.properties
        if rtype == "OS::Heat::AutoScalingGroup":
            self._create_group(res, stamp)
        elif rtype in res.stack.files:
            res.nested = self._create_nested(res, res.stack.files[rtype], props, stamp)
            res.physical_id = res.nested.id
        elif rtype == "OS::Neutron::Port":
            pool = self.server_pool if in_server_pool else self.vip_pool
            res.physical_id = str(uuid.uuid4())
            fixed = props.get("fixed_ips") or []
            wanted = next((f.get("ip_address") for f in fixed if f.get("ip_address")), None)
            addr = wanted or pool.take()
            subnet = next((f.get("subnet") for f in fixed if f.get("subnet")), None)
            port = {
                "id": res.physical_id,
                "name": f"{res.stack.name}-{res.name}-{_short_id()}",
                "network_id": props.get("network") or "",
                "fixed_ips": [
                    {
                        "subnet_id": subnet or str(uuid.uuid5(uuid.NAMESPACE_DNS, pool.name)),
                        "ip_address": addr,
                    }
                ],
                "mac_address": "fa:16:3e:" + ":".join(f"{b:02x}" for b in secrets.token_bytes(3)),
                "device_id": "",
                "pool": pool.name if not wanted else "",
            }
            self.ports[res.physical_id] = port
            res.attributes = {
                "fixed_ips": port["fixed_ips"],
                "mac_address": port["mac_address"],
                "network_id": port["network_id"],
                "name": port["name"],
                "device_id": "",
                "status": "ACTIVE",
            }
        elif rtype == "OS::Neutron::FloatingIP":
            res.physical_id = str(uuid.uuid4())
            port = self.ports.get(str(props.get("port_id") or ""))
            res.attributes = {
                "floating_ip_address": self.floating_pool.take(),
                "fixed_ip_address": port["fixed_ips"][0]["ip_address"] if port else None,
                "port_id": props.get("port_id"),
                "floating_network_id": props.get("floating_network"),
            }
        elif rtype == "OS::Nova::Server":
            self._create_server(res)
        elif rtype == "OS::Cinder::Volume":
            volume = self.volumes.create(
                props.get("name") or f"{res.stack.name}-{res.name}", props.get("size")
            )
            res.physical_id = volume["id"]
            res.attributes = self.volumes.attributes(volume)
        elif rtype == "OS::Cinder::VolumeAttachment":
            try:
                attachment = self.volumes.attach(
                    str(props.get("volume_id") or ""),
                    str(props.get("instance_uuid") or ""),
                    props.get("mountpoint"),
                )
            except KeyError as exc:
                raise HeatError(f"{res.name}: no volume {exc}") from None
            res.physical_id = attachment["attachment_id"]
            res.attributes = {"device": attachment["device"]}
        elif rtype == "OS::Nova::ServerGroup":
            res.physical_id = str(uuid.uuid4())
            self.server_groups[res.physical_id] = {
                "id": res.physical_id,
                "name": props.get("name") or f"{res.stack.name}-{res.name}-{_short_id()}",
                "policies": props.get("policies") or ["anti-affinity"],
                "members": [],
            }
            res.attributes = {"name": self.server_groups[res.physical_id]["name"]}
        else:
            res.physical_id = str(uuid.uuid4())
        res.status, res.status_reason = "CREATE_COMPLETE", "state changed"
        self.event(res, "CREATE_COMPLETE", "state changed", stamp)

    def _update_resource(self, res: Resource, stamp: str) -> None:
        if res.type == "OS::Heat::AutoScalingGroup":
            self._update_group(res, stamp)
        elif res.nested is not None:
            nested = res.nested
            nested.params = dict(res.properties)
            nested.updated_time = stamp
            self._converge(nested, stamp)
            nested.status, nested.status_reason = "UPDATE_COMPLETE", "Stack UPDATE completed"
        else:
            return
        res.updated_time = stamp
        res.status, res.status_reason = "UPDATE_COMPLETE", "state changed"
        self.event(res, "UPDATE_COMPLETE", "state changed", stamp)

    def _create_nested(
        self, res: Resource, template_text: str, params: dict[str, Any], stamp: str
    ) -> Stack:
        name = f"{res.stack.name}-{res.name}-{_short_id()}"
        nested = self._new_stack(
            name,
            parse_template(template_text),
            res.stack.files,
            dict(params),
            stamp,
            parent=(res.stack, res.name),
        )
        try:
            self._converge(nested, stamp)
        except HeatError:
            nested.status = "CREATE_FAILED"
            raise
        nested.status, nested.status_reason = "CREATE_COMPLETE", "Stack CREATE completed"
        return nested

    # ---- AutoScalingGroup -------------------------------------------------------------

    def _member_definition(self, group: Resource) -> dict[str, Any]:
        member = group.properties.get("resource") or {}
        if not isinstance(member, dict) or "type" not in member:
            raise HeatError(f"{group.name}: AutoScalingGroup needs a resource definition")
        return member

    def _desired(self, group: Resource) -> int:
        props = group.properties
        lo, hi = int(props.get("min_size") or 0), int(props.get("max_size") or 0)
        want = props.get("desired_capacity")
        n = lo if want is None else int(want)
        if group.capacity_applied is not None and n != group.capacity_applied:
            group.capacity_signalled = None  # the template's capacity changed: it wins
        group.capacity_applied = n
        if group.capacity_signalled is not None:
            n = group.capacity_signalled
        if hi and n > hi:
            raise HeatError(f"{group.name}: desired_capacity {n} > max_size {hi}")
        return max(n, lo)

    def _create_group(self, group: Resource, stamp: str) -> None:
        gstack = self._new_stack(
            f"{group.stack.name}-{group.name}-{_short_id()}",
            {"heat_template_version": "2015-04-30", "resources": {}},
            group.stack.files,
            {},
            stamp,
            parent=(group.stack, group.name),
        )
        group.nested = gstack
        group.physical_id = gstack.id
        self._update_group(group, stamp)
        gstack.status, gstack.status_reason = "CREATE_COMPLETE", "Stack CREATE completed"

    def _update_group(self, group: Resource, stamp: str) -> None:
        gstack = group.nested
        assert gstack is not None
        member = self._member_definition(group)
        want = self._desired(group)
        members = list(gstack.resources.values())
        # Shrink: unhealthy members go first, then the oldest.
        members.sort(key=lambda r: (not r.unhealthy, r.creation_time))
        while len(members) > want:
            gone = members.pop(0)
            gstack.resources.pop(gone.name)
            self._delete_resource(gone)
        # What stays follows the (maybe new) member definition; grow up to `want`.
        rdefs = {r.name: dict(member) for r in members}
        while len(rdefs) < want:
            rdefs[_short_id()] = dict(member)
        gstack.template = {"heat_template_version": "2015-04-30", "resources": rdefs}
        gstack.updated_time = stamp
        self._converge(gstack, stamp)
        gstack.status, gstack.status_reason = "UPDATE_COMPLETE", "Stack UPDATE completed"
        group.attributes = {"current_size": len(gstack.resources)}

    # ---- servers ----------------------------------------------------------------------

    def _place(self, groups: list[str]) -> str:
        """A new server's compute host: the next in turn that runs no member of one of its
        anti-affinity groups (Nova's ServerGroupAntiAffinityFilter). When every host runs
        one, the next in turn anyway: Nova would fail the server with NoValidHost, which
        is not simulated."""
        taken = {
            self.servers[member]["OS-EXT-SRV-ATTR:host"]
            for g in groups
            if "anti-affinity" in self.server_groups.get(g, {}).get("policies", ())
            for member in self.server_groups[g]["members"]
            if member in self.servers
        }
        host = self.compute_hosts[0]
        for _ in range(len(self.compute_hosts)):
            host = self.compute_hosts[self._host_turn % len(self.compute_hosts)]
            self._host_turn += 1
            if host not in taken:
                return host
        return host

    def _create_server(self, res: Resource) -> None:
        props = res.properties
        res.physical_id = str(uuid.uuid4())
        port_ids = [n.get("port") for n in (props.get("networks") or []) if n.get("port")]
        addresses: dict[str, list[dict[str, Any]]] = {}
        for pid in port_ids:
            port = self.ports.get(pid)
            if port is None:
                continue
            port["device_id"] = res.physical_id
            net = port["network_id"] or "net0"
            addresses.setdefault(net, []).append(
                {
                    "addr": port["fixed_ips"][0]["ip_address"],
                    "version": 4,
                    "OS-EXT-IPS:type": "fixed",
                    "OS-EXT-IPS-MAC:mac_addr": port["mac_address"],
                }
            )
        hints = props.get("scheduler_hints") or {}
        groups = [g for g in [hints.get("group")] if g]
        host = self._place(groups)
        for g in groups:
            if g in self.server_groups:
                self.server_groups[g]["members"].append(res.physical_id)
        name = props.get("name") or f"{res.stack.name}-{res.name}-{_short_id()}"
        self.servers[res.physical_id] = {
            "id": res.physical_id,
            "name": name,
            "status": "ACTIVE",
            "OS-EXT-SRV-ATTR:host": host,
            "OS-EXT-SRV-ATTR:hypervisor_hostname": f"{host}.localdomain",
            "OS-EXT-SRV-ATTR:instance_name": f"instance-{len(self.servers) + 1:08x}",
            "OS-EXT-AZ:availability_zone": props.get("availability_zone") or self.zone,
            "OS-EXT-STS:vm_state": "active",
            "OS-EXT-STS:power_state": 1,
            "addresses": addresses,
            "flavor": {"original_name": props.get("flavor"), "id": props.get("flavor")},
            "image": {"id": props.get("image")},
            "server_groups": groups,
            "metadata": {},
            "port_ids": port_ids,
        }
        attached = []
        for bdm in props.get("block_device_mapping_v2") or []:
            if isinstance(bdm, dict) and bdm.get("volume_id"):
                try:
                    self.volumes.attach(
                        str(bdm["volume_id"]), res.physical_id, bdm.get("device_name")
                    )
                except KeyError as exc:
                    raise HeatError(f"{res.name}: no volume {exc}") from None
                attached.append({"id": str(bdm["volume_id"])})
        self.servers[res.physical_id]["os-extended-volumes:volumes_attached"] = attached
        res.attributes = {
            "name": name,
            "addresses": addresses,
            "networks": {k: [a["addr"] for a in v] for k, v in addresses.items()},
            "first_address": next((a["addr"] for v in addresses.values() for a in v), ""),
            # Heat's OS::Nova::Server attribute (the ids of the server's groups). Tacker's
            # v1 Kubernetes driver intersects it with the stack's anti-affinity groups for
            # each worker; without it that driver fails (``set(None)``).
            "server_groups": list(groups),
        }

    def _delete_resource(self, res: Resource) -> None:
        if res.nested is not None:
            self.delete_stack(res.nested)
        elif res.type == "OS::Neutron::Port":
            port = self.ports.pop(res.physical_id, None)
            if port and port.get("pool"):
                pool = self.server_pool if port["pool"] == self.server_pool.name else self.vip_pool
                pool.give_back(port["fixed_ips"][0]["ip_address"])
        elif res.type == "OS::Neutron::FloatingIP":
            addr = res.attributes.get("floating_ip_address")
            if addr:
                self.floating_pool.give_back(str(addr))
        elif res.type == "OS::Nova::Server":
            server = self.servers.pop(res.physical_id, None)
            for g in (server or {}).get("server_groups", []):
                members = self.server_groups.get(g, {}).get("members", [])
                if res.physical_id in members:
                    members.remove(res.physical_id)
            for port in self.ports.values():
                if port["device_id"] == res.physical_id:
                    port["device_id"] = ""
            self.volumes.detach(server_id=res.physical_id)
        elif res.type == "OS::Cinder::VolumeAttachment":
            self.volumes.detach(attachment_id=res.physical_id)
        elif res.type == "OS::Cinder::Volume":
            self.volumes.delete(res.physical_id)
        elif res.type == "OS::Nova::ServerGroup":
            self.server_groups.pop(res.physical_id, None)
        res.status = "DELETE_COMPLETE"


def _files(files: dict[str, Any] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in (files or {}).items():
        out[k] = v if isinstance(v, str) else yaml.safe_dump(_json_safe(v))
    return out


def _ports_used_by_servers(defs: dict[str, dict[str, Any]]) -> set[str]:
    used: set[str] = set()
    for spec in defs.values():
        if spec.get("type") == "OS::Nova::Server":
            for net in (spec.get("properties") or {}).get("networks") or []:
                if isinstance(net, dict):
                    used.update(_refs(net.get("port")))
    return used


def _walk(value: Any, keys: list[Any]) -> Any:
    """``value[k1][k2]...`` as Heat's get_param and get_attr follow a path: a missing key or
    index (or a step into a scalar) gives ``None``."""
    for key in keys:
        if isinstance(value, dict):
            value = value.get(key)
        elif isinstance(value, list) and isinstance(key, int) and key < len(value):
            value = value[key]
        else:
            value = None
    return value
