"""capa-py's application layer: what composes the controllers and resources into commands.

The layers, top to bottom: ``capa_app`` (the command line, the providers that lifecycle workflows run, the
audit's discovery and deletion of managed kinds) over ``controllers`` over ``resources`` over ``capa_py`` (the
engine, the store, the API models, the runtime, ctrlkit). A module imports only from its own layer or the
layers below it.
"""
