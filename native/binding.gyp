{
  "targets": [
    {
      "target_name": "bpf_native",
      "sources": [
        "src/module.cc",
        "src/errors.cc",
        "src/libbpf_log.cc",
        "src/args.cc",
        "src/btf_layout.cc",
        "src/map_ops.cc",
        "src/bpf_object_wrap.cc",
        "src/bpf_link_wrap.cc"
      ],
      "include_dirs": [
        "<!(node -p \"require('node-addon-api').include_dir\")"
      ],
      # C++ exceptions are enabled: a thrown Napi::Error (or any std::exception, e.g.
      # bad_alloc) becomes a JS exception at the method boundary, which keeps error paths short.
      "defines": [
        "NAPI_VERSION=8",
        "NODE_ADDON_API_CPP_EXCEPTIONS",
        "NODE_ADDON_API_CPP_EXCEPTIONS_ALL",
        "NODE_ADDON_API_DISABLE_DEPRECATED"
      ],
      "cflags!": ["-fno-exceptions"],
      "cflags_cc!": ["-fno-exceptions"],
      "cflags_cc": ["-std=gnu++17", "-fexceptions", "-Wall", "-Wextra", "-Wno-unused-parameter"],
      "libraries": ["-lbpf", "-lelf", "-lz"]
    }
  ]
}
