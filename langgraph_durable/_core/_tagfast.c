/* Record tags in one call: the optional native half of langgraph_durable._core.chain.
 *
 * keys(key) -> bytes
 *     The HMAC-SHA256 key's two padded states (``key``: the key padded to 64 bytes), as
 *     an opaque value for the functions below.
 * tag(keys, fields, type, data) -> bytes
 *     The HMAC-SHA256 tag of a record, byte for byte what chain.ChainKey.tag computes:
 *     over b"lgd-tag/2", the UTF-8 lengths of the identity's fields and the type (u32
 *     big-endian), their UTF-8 bytes, then the data. Returns None when a field cannot be
 *     encoded strictly (a lone surrogate): the caller then computes the tag in Python.
 * seal(keys, fields, type, data) -> bytes
 *     data + tag(...), or None as above.
 *
 * SHA-256 is OpenSSL's (libcrypto), called with the GIL held, as chain.py holds it (see
 * hashing.py). What this saves is the interpreter's work around the hash: about 1.5-2 us
 * a record. Built when a C compiler and OpenSSL's headers are there (hatch_build.py);
 * chain.py works the same without it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#define OPENSSL_SUPPRESS_DEPRECATED
#include <openssl/sha.h>

#define MAX_FIELDS 16
#define PREFIX "lgd-tag/2"
#define PREFIX_LEN 9

typedef struct {
    SHA256_CTX inner, outer;
} Keys;

static PyObject *
keys(PyObject *self, PyObject *arg)
{
    Py_buffer key;
    if (PyObject_GetBuffer(arg, &key, PyBUF_SIMPLE) < 0)
        return NULL;
    if (key.len != 64) {
        PyBuffer_Release(&key);
        PyErr_SetString(PyExc_ValueError, "keys() takes the key padded to 64 bytes");
        return NULL;
    }
    unsigned char ipad[64], opad[64];
    const unsigned char *k = key.buf;
    for (int i = 0; i < 64; i++) {
        ipad[i] = k[i] ^ 0x36;
        opad[i] = k[i] ^ 0x5C;
    }
    PyBuffer_Release(&key);
    Keys out;
    if (!SHA256_Init(&out.inner) || !SHA256_Update(&out.inner, ipad, 64)
        || !SHA256_Init(&out.outer) || !SHA256_Update(&out.outer, opad, 64)) {
        PyErr_SetString(PyExc_RuntimeError, "SHA-256 failed");
        return NULL;
    }
    return PyBytes_FromStringAndSize((const char *)&out, sizeof out);
}

/* The 32-byte tag as a new bytes object, Py_None (new reference) when a field cannot be
 * encoded, NULL with an exception on error. */
static PyObject *
compute_tag(PyObject *const *args, unsigned char out[32])
{
    PyObject *keys_ = args[0], *fields = args[1], *type_ = args[2];
    if (!PyBytes_Check(keys_) || PyBytes_GET_SIZE(keys_) != (Py_ssize_t)sizeof(Keys)) {
        PyErr_SetString(PyExc_TypeError, "keys must be what keys() returned");
        return NULL;
    }
    if (!PyTuple_Check(fields) || !PyUnicode_Check(type_)) {
        PyErr_SetString(PyExc_TypeError, "fields must be a tuple and type a str");
        return NULL;
    }
    Py_ssize_t nf = PyTuple_GET_SIZE(fields);
    if (nf + 1 > MAX_FIELDS) {
        PyErr_SetString(PyExc_ValueError, "too many identity fields");
        return NULL;
    }
    const char *ptr[MAX_FIELDS];
    Py_ssize_t len[MAX_FIELDS];
    unsigned char lens[4 * MAX_FIELDS];
    for (Py_ssize_t i = 0; i <= nf; i++) {
        PyObject *s = i < nf ? PyTuple_GET_ITEM(fields, i) : type_;
        if (!PyUnicode_Check(s)) {
            PyErr_SetString(PyExc_TypeError, "identity fields must be str");
            return NULL;
        }
        ptr[i] = PyUnicode_AsUTF8AndSize(s, &len[i]);
        if (ptr[i] == NULL) {
            if (PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) {
                PyErr_Clear();
                Py_RETURN_NONE;
            }
            return NULL;
        }
        if ((unsigned long long)len[i] > 0xFFFFFFFFULL) {
            PyErr_SetString(PyExc_OverflowError, "identity field too long");
            return NULL;
        }
        unsigned long long n = (unsigned long long)len[i];
        lens[4 * i] = (unsigned char)((n >> 24) & 0xFF);
        lens[4 * i + 1] = (unsigned char)((n >> 16) & 0xFF);
        lens[4 * i + 2] = (unsigned char)((n >> 8) & 0xFF);
        lens[4 * i + 3] = (unsigned char)(n & 0xFF);
    }
    Py_buffer data;
    if (PyObject_GetBuffer(args[3], &data, PyBUF_SIMPLE) < 0)
        return NULL;
    const Keys *k = (const Keys *)PyBytes_AS_STRING(keys_);
    SHA256_CTX c = k->inner;
    unsigned char mid[32];
    int ok = SHA256_Update(&c, PREFIX, PREFIX_LEN)
             && SHA256_Update(&c, lens, (size_t)(4 * (nf + 1)));
    for (Py_ssize_t i = 0; ok && i <= nf; i++)
        ok = SHA256_Update(&c, ptr[i], (size_t)len[i]);
    ok = ok && SHA256_Update(&c, data.buf, (size_t)data.len) && SHA256_Final(mid, &c);
    PyBuffer_Release(&data);
    SHA256_CTX o = k->outer;
    ok = ok && SHA256_Update(&o, mid, 32) && SHA256_Final(out, &o);
    if (!ok) {
        PyErr_SetString(PyExc_RuntimeError, "SHA-256 failed");
        return NULL;
    }
    Py_RETURN_TRUE;
}

/* tag(...) (with_data 0) or seal(...) (with_data 1) */
static PyObject *
tag_or_seal(PyObject *const *args, Py_ssize_t nargs, int with_data)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, with_data ? "seal(keys, fields, type, data)"
                                                   : "tag(keys, fields, type, data)");
        return NULL;
    }
    unsigned char t[32];
    PyObject *r = compute_tag(args, t);
    if (r != Py_True)
        return r; /* NULL (an error) or None (not encodable) */
    Py_DECREF(r);
    if (!with_data)
        return PyBytes_FromStringAndSize((const char *)t, 32);
    Py_buffer data;
    if (PyObject_GetBuffer(args[3], &data, PyBUF_SIMPLE) < 0)
        return NULL;
    PyObject *out = PyBytes_FromStringAndSize(NULL, data.len + 32);
    if (out != NULL) {
        char *p = PyBytes_AS_STRING(out);
        if (data.len)
            memcpy(p, data.buf, (size_t)data.len);
        memcpy(p + data.len, t, 32);
    }
    PyBuffer_Release(&data);
    return out;
}

static PyObject *
tag(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return tag_or_seal(args, nargs, 0);
}

static PyObject *
seal(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return tag_or_seal(args, nargs, 1);
}

static PyMethodDef methods[] = {
    {"keys", keys, METH_O, "keys(key padded to 64 bytes) -> the key's states"},
    {"tag", (PyCFunction)(void (*)(void))tag, METH_FASTCALL,
     "tag(keys, fields, type, data) -> the record's 32-byte tag, or None"},
    {"seal", (PyCFunction)(void (*)(void))seal, METH_FASTCALL,
     "seal(keys, fields, type, data) -> data + its tag, or None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_tagfast", "Record tags in one call (see chain.py).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__tagfast(void)
{
    return PyModule_Create(&module);
}
