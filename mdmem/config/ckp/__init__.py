"""The Claw Kernel Protocol (CKP 0.3.0) ``kind: Memory`` declaration, both ways (docs/ckp.md).

- ``document``: read a declaration file (YAML or JSON) safely;
- ``rules``: the schema and the spec's MUST rules, errors naming the field (``spec.stores[1].backend``);
- ``to_config``: declaration -> mdmem config dict, with what each field became (``fields.Field``);
- ``from_config``: an agent's loaded config -> declaration, with what it could not carry.
"""
