"""The accuracy gate: a frozen plan of what to run (`plan`), the kernels it names
(`kernels`), the runner of each layer's batches (`runner`), the repro commands
(`repro`), and one run from options to exit status (`session`)."""
