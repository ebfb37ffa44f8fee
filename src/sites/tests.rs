//! The site rule's unit tests: keys, labels, mixed stacks, the frames skipped, and a recorded
//! run's stacks.

use super::*;
use cuguard_format::Addr;

fn frame(module: &str, function: Option<&str>) -> Frame {
    Frame {
        ip: Addr(0x1000),
        module: module.into(),
        offset: Addr(0x1a2b),
        function: function.map(Into::into),
        file: None,
        line: None,
        inlined: None,
    }
}

#[test]
fn skips_shim_driver_and_runtime_frames() {
    let stack = Stack {
        id: 1,
        frames: vec![
            frame("/opt/cuguard/libcuguard.so", Some("cuMemAlloc_v2")),
            frame("/usr/lib/libcuda.so.1", None),
            frame("/usr/local/cuda/lib64/libcudart.so.13", Some("cudaMalloc")),
            frame("/opt/app/train", Some("make_buffers")),
            frame("/opt/app/train", Some("main")),
        ],
        python: vec![],
        site: None,
        owner: None,
        mixed: Vec::new(),
        origin: None,
    };
    assert_eq!(site_of_stack(&stack).key, "make_buffers");
}

#[test]
fn unnamed_frames_use_module_and_offset() {
    let stack = Stack {
        id: 1,
        frames: vec![frame("/opt/app/lib/libscratch.so", None)],
        python: vec![],
        site: None,
        owner: None,
        mixed: Vec::new(),
        origin: None,
    };
    assert_eq!(site_of_stack(&stack).key, "libscratch.so+0x1a2b");
}

#[test]
fn all_runtime_frames_fall_back_to_the_first() {
    let stack = Stack {
        id: 1,
        frames: vec![frame("/x/libcuguard.so", Some("cuMemAlloc_v2"))],
        python: vec![],
        site: None,
        owner: None,
        mixed: Vec::new(),
        origin: None,
    };
    assert_eq!(site_of_stack(&stack).key, "cuMemAlloc_v2");
    let empty = Stack {
        id: 2,
        frames: vec![],
        python: vec![],
        site: None,
        owner: None,
        mixed: Vec::new(),
        origin: None,
    };
    assert_eq!(site_of_stack(&empty).key, "<empty stack>");
}

#[test]
fn the_shims_site_wins_and_keeps_lines_apart() {
    let py = |line| cuguard_format::PyFrame {
        file: "/work/train.py".into(),
        line: Some(line),
        function: "make".into(),
        entry: None,
        display: None,
    };
    let stack = |line| Stack {
        id: 1,
        frames: vec![frame("/usr/lib/libcudart.so.13", Some("cudaMalloc"))],
        python: vec![py(line)],
        site: Some(cuguard_format::StackSite {
            in_: "python".into(),
            index: 0,
            fingerprint: "f".into(),
            kind: None,
        }),
        owner: None,
        mixed: Vec::new(),
        origin: None,
    };
    assert_eq!(site_of_stack(&stack(75)).key, "make (train.py:75)");
    assert_ne!(site_of_stack(&stack(75)).key, site_of_stack(&stack(76)).key);
    let native = Stack {
        id: 2,
        frames: vec![
            frame("/tmp/planted", Some("cudaMalloc")),
            Frame {
                file: Some("/src/planted_leaks.cu".into()),
                line: Some(29),
                ..frame("/tmp/planted", Some("leak_in_static_function"))
            },
        ],
        python: vec![],
        site: Some(cuguard_format::StackSite {
            in_: "frames".into(),
            index: 1,
            fingerprint: "g".into(),
            kind: None,
        }),
        owner: None,
        mixed: Vec::new(),
        origin: None,
    };
    assert_eq!(
        site_of_stack(&native).key,
        "leak_in_static_function (planted_leaks.cu:29)"
    );
}

fn named(module: &str, function: &str, file: Option<&str>, line: Option<u32>) -> Frame {
    Frame {
        file: file.map(Into::into),
        line,
        ..frame(module, Some(function))
    }
}

fn site(in_: &str, index: usize, kind: Option<&str>) -> Option<cuguard_format::StackSite> {
    Some(cuguard_format::StackSite {
        in_: in_.into(),
        index,
        fingerprint: "f".into(),
        kind: kind.map(Into::into),
    })
}

#[test]
fn a_label_prints_the_location_once_and_says_what_the_site_is() {
    let user = Stack {
        id: 1,
        frames: vec![
            frame("/x/libcuguard.so", Some("cuMemAllocAsync")),
            named(
                "/opt/app/cudarc_leaks",
                "cudarc_leaks::main",
                Some("/src/cudarc_leaks.rs"),
                Some(25),
            ),
        ],
        python: vec![],
        site: site("frames", 1, None),
        owner: None,
        mixed: Vec::new(),
        origin: None,
    };
    let s = site_of_stack(&user);
    assert_eq!(s.key, "cudarc_leaks::main (cudarc_leaks.rs:25)");
    assert_eq!(s.label(), "cudarc_leaks::main (cudarc_leaks.rs:25)");
    assert_eq!(
        s.kind,
        Some(SiteKind::User),
        "older reports: the user's frame"
    );

    let torch = "/venv/torch/lib/libtorch_cpu.so";
    let autograd = Stack {
        id: 2,
        frames: vec![
            frame("/x/libcuguard.so", Some("cuMemAlloc_v2")),
            named(
                torch,
                "torch::autograd::generated::AddmmBackward0::apply(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)",
                Some("torch/csrc/autograd/generated/Functions.cpp"),
                Some(1520),
            ),
            named(
                torch,
                "torch::autograd::Engine::thread_main(std::shared_ptr<torch::autograd::GraphTask> const&)",
                None,
                None,
            ),
        ],
        python: vec![],
        site: site("frames", 1, Some("operation")),
        owner: None,
        mixed: Vec::new(),
        origin: None,
    };
    let s = site_of_stack(&autograd);
    assert_eq!(
        s.label(),
        "on the autograd thread: AddmmBackward0::apply (Functions.cpp:1520)"
    );
    assert!(
        s.key
            .starts_with("torch::autograd::generated::AddmmBackward0::apply(")
    );
    let elsewhere = Stack {
        frames: autograd.frames[..2].to_vec(),
        ..autograd.clone()
    };
    assert_eq!(
        site_of_stack(&elsewhere).label(),
        "operation: AddmmBackward0::apply (Functions.cpp:1520)"
    );
    let fallback = Stack {
        site: site("frames", 1, Some("fallback")),
        ..elsewhere
    };
    assert_eq!(
        site_of_stack(&fallback).label(),
        "framework: AddmmBackward0::apply (Functions.cpp:1520)"
    );
    // A kind from the future is shown plainly.
    let future = Stack {
        site: site("frames", 1, Some("psychic")),
        ..fallback
    };
    assert_eq!(site_of_stack(&future).kind, None);
    assert!(
        site_of_stack(&future)
            .label()
            .starts_with("torch::autograd::generated::")
    );
}

fn python_stack(mixed: Vec<cuguard_format::MixedRef>, entries: [Option<bool>; 2]) -> Stack {
    let py = "/usr/bin/python3.12";
    let pyframe = |function: &str, line, entry| cuguard_format::PyFrame {
        file: "/work/train.py".into(),
        line: Some(line),
        function: function.into(),
        entry,
        display: None,
    };
    Stack {
        id: 7,
        frames: vec![
            frame("/x/libcuguard.so", Some("cuMemAlloc_v2")),
            frame("/venv/torch/lib/libcudart.so.13", Some("cudaMalloc")),
            named(
                "/venv/torch/lib/libtorch_cuda.so",
                "at::native::empty_cuda(c10::ArrayRef<long>)",
                None,
                None,
            ),
            frame(py, Some("_PyEval_EvalFrameDefault")),
            frame(py, Some("Py_RunMain")),
            frame("/lib/libc.so.6", Some("__libc_start_call_main")),
        ],
        python: vec![
            pyframe("step", 7, entries[0]),
            pyframe("<module>", 12, entries[1]),
        ],
        site: site("python", 0, Some("user")),
        owner: None,
        mixed,
        origin: None,
    }
}

#[test]
fn chains_read_like_py_spy_native() {
    let want = [
        "at::native::empty_cuda",
        "step (train.py:7)",
        "<module> (train.py:12)",
    ];
    // From entry marks.
    let stack = python_stack(Vec::new(), [Some(false), Some(true)]);
    assert_eq!(chain(&stack), want);
    // From the report's own mixed order.
    let m = |native, python| cuguard_format::MixedRef { native, python };
    let stack = python_stack(
        vec![
            m(Some(0), None),
            m(Some(1), None),
            m(Some(2), None),
            m(None, Some(0)),
            m(None, Some(1)),
            m(Some(5), None),
            m(Some(99), None),
        ],
        [None, None],
    );
    assert_eq!(chain(&stack), want, "bad indices are skipped");
    // Neither: no mixed order, no chain.
    let stack = python_stack(Vec::new(), [None, None]);
    assert_eq!(mixed_order(&stack), None);
    assert!(chain(&stack).is_empty());
}

/// A stack of `shim/symbolize/tests/fixtures/stacks-recorded.txt` (recorded on the H200) as
/// the report gives it: its native frames as listed, its Python frames run by one call of
/// the evaluation loop (the entry mark on the outermost), so that the mixed order puts them
/// at the first evaluation frame listed after them.
fn recorded(name: &str) -> Stack {
    let text = include_str!("../../shim/symbolize/tests/fixtures/stacks-recorded.txt");
    let head = format!("stack {name}");
    let block = text
        .split("\n\n")
        .find(|b| b.lines().any(|l| l == head))
        .unwrap_or_else(|| panic!("no {head}"));
    let opt = |s: &str| (s != "-").then(|| s.to_string());
    let mut frames = Vec::new();
    let mut python = Vec::new();
    for line in block.lines() {
        if let Some(rest) = line.strip_prefix("N ") {
            let p: Vec<&str> = rest.split(" | ").collect();
            frames.push(Frame {
                file: opt(p[2]).map(Into::into),
                line: p[3].parse().ok(),
                ..frame(p[0], opt(p[1]).as_deref())
            });
        } else if let Some(rest) = line.strip_prefix("P ") {
            let p: Vec<&str> = rest.split(" | ").collect();
            python.push(cuguard_format::PyFrame {
                file: p[0].into(),
                line: p[2].parse().ok(),
                function: p[1].into(),
                entry: Some(false),
                display: None,
            });
        }
    }
    if let Some(last) = python.last_mut() {
        last.entry = Some(true);
    }
    Stack {
        id: 1,
        frames,
        python,
        site: None,
        owner: None,
        mixed: Vec::new(),
        origin: None,
    }
}

#[test]
fn pytorch_chains_fold_the_framework_and_reach_the_users_lines() {
    // torch.full on the main thread: the runtime and the allocator left out, the 16
    // frames of ATen's dispatcher and kernels in one entry, then the user's lines.
    let stack = recorded("torch_tensor_caching_off");
    assert_eq!(
        chain(&stack),
        [
            "… 16 frames in libtorch_cpu.so, libtorch_cuda.so, libtorch_python.so",
            "case_torch (clients.py:54)",
            "main (clients.py:170)",
            "<module> (clients.py:182)",
        ]
    );
    // The flame graph keeps every frame.
    let names = mixed_names(&stack).unwrap();
    assert_eq!(names.len(), 16 + 3);
    assert_eq!(names[0], "at::detail::empty_generic");
    assert_eq!(names[15], "torch::autograd::THPVariable_full");
    // nn.Linear's forward: ATen's frames and torch.nn's Python frames are one run.
    let stack = recorded("torch_forward_cublaslt_workspace");
    assert_eq!(
        chain(&stack),
        [
            "… 19 frames in libtorch_cuda.so, libtorch_cpu.so and 2 more",
            "torch_train (reliability.py:28)",
            "<module> (reliability.py:52)",
        ]
    );
    // Without folding this chain would have been ATen's first eight frames and "…".
    assert!(mixed_names(&stack).unwrap().len() > MAX_CHAIN + 2);
    // CuPy: its extension modules and its Python frames, named by the package.
    let stack = recorded("cupy_pool_off_array");
    assert_eq!(
        chain(&stack),
        [
            "… 6 frames in cupy",
            "case_cupy (clients.py:89)",
            "main (clients.py:170)",
            "<module> (clients.py:182)",
        ]
    );
    // JAX: a long Python run of the framework, folded by its package.
    let stack = recorded("jax_cudnn_handle");
    let c = chain(&stack);
    assert!(c.len() <= MAX_CHAIN, "{c:?}");
    assert!(
        c.iter().any(|e| e.starts_with("… ") && e.contains("jax")),
        "{c:?}"
    );
    assert_eq!(
        &c[c.len() - 3..],
        [
            "case_jax (clients.py:125)",
            "main (clients.py:170)",
            "<module> (clients.py:182)"
        ],
        "{c:?}"
    );
}

#[test]
fn folds_keep_operations_and_user_frames_and_count_what_they_hide() {
    let torch = "/venv/torch/lib/libtorch_cpu.so";
    let py = "/usr/bin/python3.12";
    let mut stack = python_stack(Vec::new(), [Some(false), Some(true)]);
    // allocator, 4 framework frames, an operation, 3 framework frames, a user native frame,
    // 2 framework frames, then the evaluation loop.
    stack.frames = vec![
        frame("/x/libcuguard.so", Some("cuMemAlloc_v2")),
        frame(
            "/venv/torch/lib/libc10_cuda.so",
            Some(
                "c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::allocate(unsigned long)",
            ),
        ),
        frame(
            torch,
            Some("at::detail::empty_generic(c10::ArrayRef<long>)"),
        ),
        frame("/lib/x86_64-linux-gnu/libc.so.6", Some("memset")),
        frame(torch, Some("at::native::empty_cuda(c10::ArrayRef<long>)")),
        frame(torch, Some("at::_ops::empty::call(c10::ArrayRef<long>)")),
        frame(
            torch,
            Some("c10::impl::wrap_kernel_functor_unboxed_<void>::call()"),
        ),
        frame(
            torch,
            Some("torch::autograd::generated::MulBackward0::apply(std::vector<at::Tensor>&&)"),
        ),
        frame(torch, Some("at::_ops::mul::call()")),
        frame(torch, Some("at::_ops::mul::redispatch()")),
        frame(
            torch,
            Some("torch::autograd::THPVariable_mul(_object*, _object*)"),
        ),
        named(
            "/opt/app/libmine.so",
            "mine::step(int)",
            Some("/src/mine.cc"),
            Some(9),
        ),
        frame(torch, Some("at::_ops::add::call()")),
        frame(torch, Some("at::_ops::add::redispatch()")),
        frame(py, Some("_PyEval_EvalFrameDefault")),
        frame(py, Some("Py_RunMain")),
    ];
    assert_eq!(
        chain(&stack),
        [
            "… 4 frames in libtorch_cpu.so",
            "torch::autograd::generated::MulBackward0::apply",
            "… 3 frames in libtorch_cpu.so",
            "mine::step (mine.cc:9)",
            "at::_ops::add::call",
            "at::_ops::add::redispatch",
            "step (train.py:7)",
            "<module> (train.py:12)",
        ],
        "libc's frame is left out and does not break the run; two frames are not folded"
    );
    // Exactly MAX_CHAIN entries: as they are. One more, and what lies between the user's
    // native frame and the Python line that called it is folded, so the ends stay.
    stack.python.insert(
        0,
        cuguard_format::PyFrame {
            file: "/work/train.py".into(),
            line: Some(3),
            function: "inner".into(),
            entry: Some(false),
            display: None,
        },
    );
    assert_eq!(
        chain(&stack),
        [
            "… 4 frames in libtorch_cpu.so",
            "torch::autograd::generated::MulBackward0::apply",
            "… 3 frames in libtorch_cpu.so",
            "mine::step (mine.cc:9)",
            "… 2 frames in libtorch_cpu.so",
            "inner (train.py:3)",
            "step (train.py:7)",
            "<module> (train.py:12)",
        ]
    );
    // A run over many modules names three, or two and how many more.
    let run: Vec<String> = ["a.so", "b.so", "a.so", "c.so", "d.so", "e.so"]
        .iter()
        .map(|m| m.to_string())
        .collect();
    assert_eq!(fold_text(&run[..4]), "… 4 frames in a.so, b.so, c.so");
    assert_eq!(fold_text(&run), "… 6 frames in a.so, b.so and 3 more");
    assert_eq!(
        python_place("/v/lib/python3.12/site-packages/torch/nn/modules/module.py"),
        "torch"
    );
    assert_eq!(
        python_place("/usr/lib/python3/dist-packages/numpy/core.py"),
        "numpy"
    );
    assert_eq!(python_place("/work/train.py"), "train.py");
    assert_eq!(
        native_place("/v/site-packages/cupy/_core/core.cpython-312-x86_64-linux-gnu.so"),
        "cupy"
    );
    assert_eq!(
        native_place("/v/site-packages/torch/lib/libtorch_cpu.so"),
        "libtorch_cpu.so"
    );
}

#[test]
fn a_deep_native_library_folds_between_its_first_frame_and_its_caller() {
    // A library of the user's, 11 calls deep, called through ctypes from Python.
    let py = "/usr/bin/python3.12";
    let deep = "/work/libdeep.so";
    let mut frames = vec![frame("/x/libcuguard.so", Some("cuMemAlloc_v2"))];
    for i in 0..11 {
        let name = format!("deep_{i}");
        frames.push(named(deep, &name, Some("/work/deep.c"), Some(4 + i)));
    }
    frames.extend([
        frame("/lib/x86_64-linux-gnu/libffi.so.8", Some("ffi_call")),
        frame(
            "/usr/lib/python3.12/lib-dynload/_ctypes.cpython-312-x86_64-linux-gnu.so",
            Some("_ctypes_callproc"),
        ),
        frame(py, Some("_PyEval_EvalFrameDefault")),
        frame(py, Some("Py_RunMain")),
    ]);
    let pyframe = |function: &str, line, entry| cuguard_format::PyFrame {
        file: "/work/deep.py".into(),
        line: Some(line),
        function: function.into(),
        entry: Some(entry),
        display: None,
    };
    let mut stack = Stack {
        id: 1,
        frames,
        python: vec![
            pyframe("load_weights", 9, false),
            pyframe("<module>", 12, true),
        ],
        site: None,
        owner: None,
        mixed: Vec::new(),
        origin: None,
    };
    assert_eq!(
        chain(&stack),
        [
            "deep_0 (deep.c:4)",
            "… 10 frames in libdeep.so",
            "load_weights (deep.py:9)",
            "<module> (deep.py:12)",
        ]
    );
    // Six frames deep, the chain fits: nothing folded.
    stack.frames.drain(7..12);
    assert_eq!(chain(&stack).len(), 6 + 2);
    assert_eq!(chain(&stack)[MAX_CHAIN - 1], "<module> (deep.py:12)");
    // A native `main` calls the user's code as a Python line does: everything before it
    // (the Python frames here run by no evaluation frame on the stack) is kept.
    let mut stack = Stack {
        python: vec![pyframe("callback", 3, true)],
        ..stack
    };
    stack.frames.truncate(7);
    for i in 6..11 {
        let name = format!("deep_{i}");
        stack
            .frames
            .push(named(deep, &name, Some("/work/deep.c"), Some(4 + i)));
    }
    stack
        .frames
        .push(named("/work/app", "main", Some("/work/app.c"), Some(30)));
    assert_eq!(
        chain(&stack),
        [
            "deep_0 (deep.c:4)",
            "… 10 frames in libdeep.so",
            "main (app.c:30)",
            "callback (deep.py:3)",
        ]
    );
}

#[test]
fn origins_and_cell_names_in_labels() {
    let node = Site {
        key: "k".into(),
        name: "AddmmBackward0::apply".into(),
        location: Some("Functions.cpp:1520".into()),
        function: None,
        module: None,
        kind: Some(SiteKind::Operation),
        context: Some(AUTOGRAD_THREAD.into()),
        origin: Some("train.py:42".into()),
        via: None,
    };
    assert_eq!(
        node.label(),
        "on the autograd thread: AddmmBackward0::apply (Functions.cpp:1520), backward from train.py:42"
    );
    let elsewhere = Site {
        context: None,
        ..node
    };
    assert_eq!(
        elsewhere.label(),
        "operation: AddmmBackward0::apply (Functions.cpp:1520), from train.py:42"
    );
    let cell = |line, display: Option<&str>| cuguard_format::PyFrame {
        file: "/tmp/ipykernel_4242/817962334.py".into(),
        line,
        function: "<module>".into(),
        entry: Some(true),
        display: display.map(Into::into),
    };
    assert_eq!(
        python_location(&cell(Some(5), Some("Cell In[2]"))).unwrap(),
        "Cell In[2], line 5"
    );
    assert_eq!(
        python_location(&cell(None, Some("Cell In[2]"))).unwrap(),
        "Cell In[2]"
    );
    assert_eq!(
        python_location(&cell(Some(5), None)).unwrap(),
        "817962334.py:5"
    );
    // A chain shows the cell's name too.
    let mut stack = python_stack(Vec::new(), [Some(false), Some(true)]);
    stack.python[1].display = Some("Cell In[7]".into());
    assert_eq!(
        chain(&stack).last().unwrap(),
        "<module> (Cell In[7], line 12)"
    );
}

#[test]
fn mixed_names_are_chains_at_full_depth() {
    let mut stack = python_stack(Vec::new(), [Some(false), Some(true)]);
    assert_eq!(mixed_names(&stack), Some(chain(&stack)));
    // Twelve Python frames: the chain keeps its ends within MAX_CHAIN, the names go on.
    stack.python = (0..12)
        .map(|i| cuguard_format::PyFrame {
            file: "/work/deep.py".into(),
            line: Some(i),
            function: format!("f{i}"),
            entry: Some(i == 11),
            display: None,
        })
        .collect();
    assert_eq!(
        chain(&stack),
        [
            "at::native::empty_cuda",
            "f0 (deep.py:0)",
            "f1 (deep.py:1)",
            "… 6 frames in deep.py",
            "f8 (deep.py:8)",
            "f9 (deep.py:9)",
            "f10 (deep.py:10)",
            "f11 (deep.py:11)",
        ]
    );
    let names = mixed_names(&stack).unwrap();
    assert_eq!(names.len(), 13);
    assert_eq!(names[0], "at::native::empty_cuda");
    assert_eq!(names[12], "f11 (deep.py:11)");
    // One frame left is still a name (the chain leaves it to the site).
    stack.python.truncate(1);
    stack.python[0].entry = Some(true);
    stack.frames.remove(2);
    assert_eq!(mixed_names(&stack).unwrap(), ["f0 (deep.py:0)"]);
    assert!(chain(&stack).is_empty());
    stack.python.clear();
    assert_eq!(mixed_names(&stack), None);
}
