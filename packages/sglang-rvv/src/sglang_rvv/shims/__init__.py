"""Stand-ins for modules SGLang's CPU mode imports but no CPU/riscv64 build provides."""
