/* cudal2.linear's front: the fallback's fastest path in C, everything else in Python (cudal2/op_front.py).
 *
 * A call linear(x, weight[, bias]) whose weight the op keeps as one whose every call runs torch (ops.py's
 * _torch_weights maps id(weight) to _EVERY_CALL), or every call unless a CUDA graph captures it (_UNLESS_CAPTURED:
 * a kernel serves the weight's shape only in graphs, and each such count has been built) where none captures
 * now, or whose entry there names x's element count among those that run torch (the entry's to_torch set: a
 * weight whose shape a kernel serves at other row counts; or its to_torch_eager set, those a kernel serves only
 * while a CUDA graph captures, where none captures now), calls torch's linear here, with no Python frame of
 * cudal2's. Any other positional call goes to the op's eager path
 * with what the dict holds for the weight and x's element count where read (ops._eager_linear(x, weight, bias,
 * known, x_numel)); a call with keywords, or while the trace flag is set, to the Python front unchanged. The
 * objects it consults are bound by bind(); nothing here knows the table's rules. Where the probe is bound
 * (op_front_probe.cpp: functions that read x's count and its stream from torch's C++ objects), it answers
 * first; where it cannot tell, torch's Python bindings answer, as without it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>  /* PyMemberDef's T_OBJECT_EX: a kept entry's __slots__, read at their offsets */

static PyObject *kept;          /* dict: id(weight) -> what the op knows of it */
static PyObject *every_call;    /* the value that says: this weight's every call runs torch */
static PyObject *unless_captured;  /* the value that says: its every call runs torch unless a CUDA graph captures */
static PyObject *torch_linear;  /* torch.nn.functional.linear */
static PyObject *eager_rest;    /* rest(x, weight, bias, known, x_numel): a positional call past the fast path */
static PyObject *python_front;  /* the op's Python linear(x, weight, bias=None): every other call */
static PyObject *flag_owner;    /* an object whose attribute flag_name is true while a trace runs */
static PyObject *flag_name;
static PyObject *flag_dict;     /* flag_owner's __dict__ where flag_owner is a module, else NULL */
static PyObject *counts_name;   /* the attribute of a kept entry: the set of x's element counts that run torch */
static PyObject *eager_counts_name;  /* the same for counts that run torch unless a CUDA graph captures */
static PyObject *raw_stream;    /* raw_stream(device index): the current stream's handle there (0: legacy default) */
static PyObject *capturing;     /* capturing(): whether a CUDA graph captures on the current device's stream */
static PyObject *capture_test;  /* None, or capture_test(x): whether a capture records a call on x (tests) */
static PyObject *get_device_name;  /* "get_device" */
static PyObject *numel_name;    /* "numel" */
/* the probe's functions (NULL: not bound): x's element count, or -1 where it cannot tell; and 1 where no CUDA
 * graph can record a call on x now, 0 where one may, -1 where it cannot tell */
static long long (*probe_numel)(PyObject *x);
static int (*probe_uncaptured)(PyObject *x);
/* and F.linear(x, weight, bias) through at::linear, torch's binding less its argument parse: a new reference, or
 * NULL (no error set) where an override may decide or at::linear raised or warned: torch_linear then runs it */
static PyObject *(*probe_linear)(PyObject *x, PyObject *weight, PyObject *bias);
/* the type of kept entry whose count sets were last read (a reference held), and their slots' offsets (-1: not
 * a slot; read by getattr); see counts_of */
static PyObject *slotted;
static Py_ssize_t counts_at = -1, eager_counts_at = -1;

static PyObject *
front_bind(PyObject *self, PyObject *args)
{
    PyObject *k, *e, *u, *t, *r, *p, *o, *n, *c, *ec, *rs, *cap, *ct;
    unsigned long long numel_at, uncaptured_at, linear_at;
    if (!PyArg_ParseTuple(args, "O!OOOOOOUUUOOOKKK:bind", &PyDict_Type, &k, &e, &u, &t, &r, &p, &o, &n, &c, &ec, &rs,
                          &cap, &ct, &numel_at, &uncaptured_at, &linear_at))
        return NULL;
    if (get_device_name == NULL && (get_device_name = PyUnicode_InternFromString("get_device")) == NULL)
        return NULL;
    if (numel_name == NULL && (numel_name = PyUnicode_InternFromString("numel")) == NULL)
        return NULL;

    if (!PyCallable_Check(t) || !PyCallable_Check(r) || !PyCallable_Check(p) || !PyCallable_Check(rs)
            || !PyCallable_Check(cap) || (ct != Py_None && !PyCallable_Check(ct))) {
        PyErr_SetString(PyExc_TypeError, "bind: torch_linear, eager_rest, python_front, raw_stream and capturing "
                        "must be callable, capture_test callable or None");
        return NULL;
    }
    PyObject **slots[] = {&kept, &every_call, &unless_captured, &torch_linear, &eager_rest, &python_front,
                          &flag_owner, &flag_name, &counts_name, &eager_counts_name, &raw_stream, &capturing,
                          &capture_test, &flag_dict};
    PyObject *values[] = {k, e, u, t, r, p, o, n, c, ec, rs, cap, ct,
                          PyModule_Check(o) ? PyModule_GetDict(o) : NULL /* (borrowed) */};
    for (size_t i = 0; i < sizeof slots / sizeof slots[0]; i++) {
        Py_XINCREF(values[i]);
        Py_XSETREF(*slots[i], values[i]);
    }
    Py_CLEAR(slotted);  /* (the names may be others now) */
    probe_numel = (long long (*)(PyObject *))(uintptr_t)numel_at;
    probe_uncaptured = (int (*)(PyObject *))(uintptr_t)uncaptured_at;
    probe_linear = (PyObject *(*)(PyObject *, PyObject *, PyObject *))(uintptr_t)linear_at;
    Py_RETURN_NONE;
}

/* The offset of type's __slots__ member name (an object slot), or -1 where name is no such slot. */
static Py_ssize_t
slot_offset(PyObject *type, PyObject *name)
{
    PyObject *d = PyObject_GetAttr(type, name);  /* a __slots__ name: its member descriptor */
    if (d == NULL) {
        PyErr_Clear();
        return -1;
    }
    Py_ssize_t at = -1;
    if (Py_IS_TYPE(d, &PyMemberDescr_Type)) {
        PyMemberDef *member = ((PyMemberDescrObject *)d)->d_member;
        if (member->type == T_OBJECT_EX)
            at = member->offset;
    }
    Py_DECREF(d);
    return at;
}

/* A kept entry's count set, counts_name's or (eager) eager_counts_name's, as a new reference (NULL with an error
 * set, as getattr gives it): read at its slot's offset where the entry's type keeps it in __slots__ (ops._Plan),
 * else by getattr. Why: a row-count call's getattr and new int were most of what it costs beyond a weight kept
 * whole (on a 2-core CPU, a count of 300: getattr 30 to 60 ns, the int 15 to 45; the row-count call's cost beyond
 * the kept-whole one went from 92 to 113 ns to 44 to 94 with both read here, two runs of each, 2026-11-30).
 * slotted: the type read (a reference held, above), its offsets, or -1 where a name is not such a slot. */
static PyObject *
counts_of(PyObject *known, int eager)
{
    PyObject *type = (PyObject *)Py_TYPE(known);
    if (type != slotted) {
        Py_INCREF(type);
        Py_XSETREF(slotted, type);
        counts_at = slot_offset(type, counts_name);
        eager_counts_at = slot_offset(type, eager_counts_name);
    }
    Py_ssize_t at = eager ? eager_counts_at : counts_at;
    if (at >= 0) {
        PyObject *counts = *(PyObject **)((char *)known + at);
        if (counts != NULL)
            return Py_NewRef(counts);
    }
    return PyObject_GetAttr(known, eager ? eager_counts_name : counts_name);  /* (an unset slot raises here) */
}

/* x's element count as an int: recent counts' ints are kept, so that a model's calls, whose counts repeat, make
 * none (8 of them, placed by a hash of the count: counts are multiples of K, so their low bits alone collide). */
#define COUNTS_KEPT 8
static long long kept_counts[COUNTS_KEPT];
static PyObject *kept_count_ints[COUNTS_KEPT];

static PyObject *
count_int(long long n)
{
    unsigned slot = (unsigned)(((unsigned long long)n * 0x9E3779B97F4A7C15ull) >> 61);
    if (kept_count_ints[slot] != NULL && kept_counts[slot] == n)
        return Py_NewRef(kept_count_ints[slot]);
    PyObject *made = PyLong_FromLongLong(n);
    if (made != NULL) {
        Py_XSETREF(kept_count_ints[slot], Py_NewRef(made));
        kept_counts[slot] = n;
    }
    return made;
}

/* Whether counts (a set, or any container) holds numel: 1, 0, or -1 on an error. */
static int
holds(PyObject *counts, PyObject *numel)
{
    return PyAnySet_Check(counts) ? PySet_Contains(counts, numel) : PySequence_Contains(counts, numel);
}

/* 1 where answer (a new reference, or NULL with an error set) is false, else 0: also where it is NULL or its truth
 * cannot be read (the error cleared). The reference is released. */
static int
is_false(PyObject *answer)
{
    int truth = answer == NULL ? -1 : PyObject_IsTrue(answer);
    Py_XDECREF(answer);
    if (truth < 0)
        PyErr_Clear();
    return truth == 0;
}

/* 1 where no CUDA graph can record a call on x now, else 0: also where that cannot be told (the eager path then
 * asks). As ops._captured_now: a CPU tensor's call is never captured, nor one on its device's legacy default
 * stream (raw handle 0), where no capture runs; otherwise capturing() answers for the current stream. A bound
 * capture_test(x) (tests that take CPU calls for captured ones) answers instead. */
static int
uncaptured(PyObject *x)
{
    if (capture_test != Py_None)
        return is_false(PyObject_CallOneArg(capture_test, x));
    int probed = probe_uncaptured != NULL ? probe_uncaptured(x) : -1;
    if (probed >= 0)
        return probed;
    PyObject *device = PyObject_CallMethodNoArgs(x, get_device_name);
    if (device == NULL) {
        PyErr_Clear();
        return 0;
    }
    long index = PyLong_AsLong(device);
    if (index == -1 && PyErr_Occurred()) {
        Py_DECREF(device);
        PyErr_Clear();
        return 0;
    }
    if (index < 0) {  /* a CPU tensor */
        Py_DECREF(device);
        return 1;
    }
    PyObject *stream = PyObject_CallOneArg(raw_stream, device);
    Py_DECREF(device);
    if (stream == NULL) {
        PyErr_Clear();
        return 0;
    }
    if (is_false(stream))  /* raw handle 0 */
        return 1;
    return is_false(PyObject_CallNoArgs(capturing));
}

/* 1 where the kept entry sends this call to torch: x's element count in its counts that run torch, or in
 * those that do unless a graph captures while none does; 0 where not, or where x has no count (the eager
 * path then decides, and raises what it raises); -1 on an error. *numel: x's element count (a new
 * reference), or NULL where x has none. */
static int
counted(PyObject *known, PyObject *x, PyObject **numel)
{
    long long probed = probe_numel != NULL ? probe_numel(x) : -1;
    *numel = probed >= 0 ? count_int(probed) : PyObject_CallMethodNoArgs(x, numel_name);
    if (*numel == NULL) {
        PyErr_Clear();
        return 0;
    }
    PyObject *counts = counts_of(known, 0);
    if (counts == NULL)
        return -1;
    int hit = holds(counts, *numel);
    Py_DECREF(counts);
    if (hit != 0)
        return hit;
    counts = counts_of(known, 1);
    if (counts == NULL)
        return -1;
    hit = holds(counts, *numel);
    Py_DECREF(counts);
    return hit > 0 ? uncaptured(x) : hit;
}

/* torch's linear(x, weight[, bias]): through the probe where it is bound and can, else torch_linear. */
static PyObject *
run_torch(PyObject *const *args, Py_ssize_t nargs)
{
    if (probe_linear != NULL) {
        PyObject *out = probe_linear(args[0], args[1], nargs == 3 ? args[2] : Py_None);
        if (out != NULL || PyErr_Occurred())
            return out;
    }
    return PyObject_Vectorcall(torch_linear, args, nargs, NULL);
}

static PyObject *
front_linear(PyObject *self, PyObject *const *args, Py_ssize_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (python_front == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "cudal2's op front was not bound (cudal2.op_front.front)");
        return NULL;
    }
    if (kwnames != NULL || nargs < 2 || nargs > 3)
        return PyObject_Vectorcall(python_front, args, nargs, kwnames);
    int tracing;
    if (flag_dict != NULL) {  /* a module's global: one dict lookup */
        PyObject *flag = PyDict_GetItemWithError(flag_dict, flag_name);  /* (borrowed) */
        tracing = flag == NULL ? (PyErr_Occurred() ? -1 : 0) : (flag == Py_False ? 0 : PyObject_IsTrue(flag));
    } else {
        PyObject *flag = PyObject_GetAttr(flag_owner, flag_name);
        if (flag == NULL)
            return NULL;
        tracing = PyObject_IsTrue(flag);
        Py_DECREF(flag);
    }
    if (tracing < 0)
        return NULL;
    if (tracing)  /* (torch.export outside Dynamo, say: the Python front decides, as when traced) */
        return PyObject_Vectorcall(python_front, args, nargs, kwnames);
    PyObject *key = PyLong_FromVoidPtr(args[1]);  /* id(weight) */
    if (key == NULL)
        return NULL;
    PyObject *known = PyDict_GetItemWithError(kept, key);  /* (borrowed) */
    Py_DECREF(key);
    if (known == NULL && PyErr_Occurred())
        return NULL;
    if (known == every_call)
        return run_torch(args, nargs);
    if (known == unless_captured && uncaptured(args[0]))  /* (a captured call: the eager path, told the same) */
        return run_torch(args, nargs);
    /* held from here: what runs below (x.numel(), a tensor subclass's __torch_function__, the rest) may let the
     * dict drop it */
    Py_XINCREF(known);
    PyObject *numel = NULL, *out;
    int hit = known == NULL || known == unless_captured ? 0 : counted(known, args[0], &numel);
    if (hit != 0) {
        out = hit < 0 ? NULL : run_torch(args, nargs);
    } else {  /* the rest, told the count read here (None: not read) */
        PyObject *rest[5] = {args[0], args[1], nargs == 3 ? args[2] : Py_None, known ? known : Py_None,
                             numel ? numel : Py_None};
        out = PyObject_Vectorcall(eager_rest, rest, 5, NULL);
    }
    Py_XDECREF(known);
    Py_XDECREF(numel);
    return out;
}

static PyMethodDef methods[] = {
    {"linear", (PyCFunction)(void (*)(void))front_linear, METH_FASTCALL | METH_KEYWORDS,
     "linear($module, x, weight, bias=None)\n--\n\n"
     "x @ weight.T + bias (nn.Linear) with the tuned kernel where one beats torch, else F.linear."},
    {"bind", front_bind, METH_VARARGS,
     "bind(kept, every_call, unless_captured, torch_linear, eager_rest, python_front, flag_owner, flag_name, "
     "counts_name, eager_counts_name, raw_stream, capturing, capture_test, numel_probe, capture_probe, linear_probe): "
     "what linear consults (the probe's functions as addresses, 0 for none)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "cudal2_op_front", NULL, -1, methods};

PyMODINIT_FUNC
PyInit_cudal2_op_front(void)
{
    return PyModule_Create(&module);
}
