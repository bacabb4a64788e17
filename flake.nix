{
  description = "inference-kernels: fused LLM-inference kernels for the Kernel Hub";

  inputs = {
    kernel-builder.url = "github:huggingface/kernels";
  };

  # `nix build .#bundle` (kernel-builder) builds every variant of build.toml in its
  # sandbox; tools/build.py is the local, single-variant stand-in for development.
  outputs =
    { self, kernel-builder }:
    kernel-builder.lib.genKernelFlakeOutputs {
      inherit self;
      path = ./.;
    };
}
