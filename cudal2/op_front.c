/* cudal2.linear's front: the fallback's fastest path in C, everything else in Python (cudal2/op_front.py).
 *
 * A call linear(x, weight[, bias]) whose weight the op keeps as one whose every call runs torch (ops.py's
 * _torch_weights maps id(weight) to _EVERY_CALL) calls torch's linear here, with no Python frame of
 * cudal2's. Any other positional call goes to the op's eager path with what the dict holds for the weight
 * (ops._eager_linear(x, weight, bias, known)); a call with keywords, or while the trace flag is set, to the
 * Python front unchanged. The objects it consults are bound by bind(); nothing here knows the table's rules.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

static PyObject *kept;          /* dict: id(weight) -> what the op knows of it */
static PyObject *every_call;    /* the value that says: this weight's every call runs torch */
static PyObject *torch_linear;  /* torch.nn.functional.linear */
static PyObject *eager_rest;    /* rest(x, weight, bias, known): a positional call past the fastest path */
static PyObject *python_front;  /* the op's Python linear(x, weight, bias=None): every other call */
static PyObject *flag_owner;    /* an object whose attribute flag_name is true while a trace runs */
static PyObject *flag_name;
static PyObject *flag_dict;     /* flag_owner's __dict__ where flag_owner is a module, else NULL */

static PyObject *
front_bind(PyObject *self, PyObject *args)
{
    PyObject *k, *e, *t, *r, *p, *o, *n;
    if (!PyArg_ParseTuple(args, "O!OOOOOU:bind", &PyDict_Type, &k, &e, &t, &r, &p, &o, &n))
        return NULL;
    if (!PyCallable_Check(t) || !PyCallable_Check(r) || !PyCallable_Check(p)) {
        PyErr_SetString(PyExc_TypeError, "bind: torch_linear, eager_rest and python_front must be callable");
        return NULL;
    }
    Py_INCREF(k); Py_XSETREF(kept, k);
    Py_INCREF(e); Py_XSETREF(every_call, e);
    Py_INCREF(t); Py_XSETREF(torch_linear, t);
    Py_INCREF(r); Py_XSETREF(eager_rest, r);
    Py_INCREF(p); Py_XSETREF(python_front, p);
    Py_INCREF(o); Py_XSETREF(flag_owner, o);
    Py_INCREF(n); Py_XSETREF(flag_name, n);
    PyObject *d = PyModule_Check(o) ? PyModule_GetDict(o) : NULL;  /* (borrowed) */
    Py_XINCREF(d); Py_XSETREF(flag_dict, d);
    Py_RETURN_NONE;
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
        return PyObject_Vectorcall(torch_linear, args, nargs, NULL);
    PyObject *rest[4] = {args[0], args[1], nargs == 3 ? args[2] : Py_None, known ? known : Py_None};
    Py_XINCREF(known);  /* (the dict may drop it while the rest runs) */
    PyObject *out = PyObject_Vectorcall(eager_rest, rest, 4, NULL);
    Py_XDECREF(known);
    return out;
}

static PyMethodDef methods[] = {
    {"linear", (PyCFunction)(void (*)(void))front_linear, METH_FASTCALL | METH_KEYWORDS,
     "linear($module, x, weight, bias=None)\n--\n\n"
     "x @ weight.T + bias (nn.Linear) with the tuned kernel where one beats torch, else F.linear."},
    {"bind", front_bind, METH_VARARGS,
     "bind(kept, every_call, torch_linear, eager_rest, python_front, flag_owner, flag_name): what linear "
     "consults."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "cudal2_op_front", NULL, -1, methods};

PyMODINIT_FUNC
PyInit_cudal2_op_front(void)
{
    return PyModule_Create(&module);
}
