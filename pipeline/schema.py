"""Spark schemas and defaults derived from the model's msgspec types, so the
pipeline parses snapshots and events exactly as the model defines them.

``spark_type(Snapshot, keep)`` gives the Spark type of a struct, pruned to the
fields in ``keep`` (a set of names, or a dict of name -> what to keep inside),
so ``from_json`` parses only what the job uses. ``defaults(PartialQueue)`` gives
the value of each field a snapshot leaves out."""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import inspect

Keep = set[str] | dict[str, Any] | None


def spark_type(annotation: Any, keep: Keep = None) -> Any:
    from pyspark.sql import types as T

    info = inspect.type_info(annotation)
    return _convert(info, keep, T)


def _convert(info: Any, keep: Keep, T: Any) -> Any:
    if isinstance(info, inspect.UnionType):
        concrete = [t for t in info.types if not isinstance(t, inspect.NoneType)]
        if len(concrete) != 1:
            return T.StringType()  # a union of shapes: kept as its JSON text
        return _convert(concrete[0], keep, T)
    if isinstance(info, inspect.StructType):
        fields = []
        for field in info.fields:
            if keep is not None and field.encode_name not in keep:
                continue
            inner = keep.get(field.encode_name) if isinstance(keep, dict) else None
            fields.append(T.StructField(field.encode_name, _convert(field.type, inner, T), True))
        return T.StructType(fields)
    if isinstance(info, (inspect.ListType, inspect.TupleType, inspect.VarTupleType)):
        item = info.item_type if not isinstance(info, inspect.TupleType) else info.item_types[0]
        return T.ArrayType(_convert(item, keep, T), True)
    if isinstance(info, inspect.DictType):
        return T.MapType(_convert(info.key_type, None, T), _convert(info.value_type, keep, T), True)
    simple = {
        inspect.StrType: T.StringType, inspect.IntType: T.LongType, inspect.FloatType: T.DoubleType,
        inspect.BoolType: T.BooleanType, inspect.LiteralType: T.StringType,
    }
    for kind, spark in simple.items():
        if isinstance(info, kind):
            return spark()
    raise TypeError(f"no Spark type for {info!r}")


def defaults(struct: type[msgspec.Struct]) -> dict[str, Any]:
    """The value a reader fills in for each field an encoder may leave out."""
    values = {}
    for field in inspect.type_info(struct).fields:
        if field.default is not inspect.NODEFAULT:
            values[field.encode_name] = field.default
        elif field.default_factory is not inspect.NODEFAULT:
            values[field.encode_name] = field.default_factory()
    return values
