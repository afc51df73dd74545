import numpy as np
import pytest
import scipy.sparse as sp

from lightfoot_pipeline.retrieval.rowsplit import RowSplit


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_dense_split_products_equal_the_whole_product_bit_for_bit(threads):
    rng = np.random.default_rng(0)
    matrix = rng.normal(size=(3001, 384)).astype(np.float32)
    x = rng.normal(size=384).astype(np.float32)
    split = RowSplit(matrix, threads=threads)
    assert len(split.blocks) == min(threads, 3001 * 384 // 200_000)
    whole = np.concatenate([block @ x for _, block in split.blocks])
    assert split.matvec(x).tobytes() == whole.tobytes()
    assert np.allclose(split.matvec(x), matrix @ x, rtol=1e-5, atol=1e-5)


def test_sparse_split_balances_stored_values_and_matches():
    rng = np.random.default_rng(1)
    rows = np.sort(rng.integers(0, 5000, 200_000))
    cols = rng.integers(0, 5000, 200_000)
    matrix = sp.coo_matrix((rng.random(200_000), (rows, cols)), shape=(5000, 5000)).tocsr()
    x = rng.random(5000)
    split = RowSplit(matrix, threads=2)
    assert len(split.blocks) == 2
    sizes = [block.nnz for _, block in split.blocks]
    assert abs(sizes[0] - sizes[1]) < 0.05 * matrix.nnz
    assert np.array_equal(split.matvec(x), matrix @ x)
    # the blocks are views of the matrix's values and indices, not copies
    assert all(np.shares_memory(block.data, matrix.data) and np.shares_memory(block.indices, matrix.indices)
               for _, block in split.blocks)


def test_small_products_stay_on_one_thread():
    split = RowSplit(np.ones((10, 4), dtype=np.float32), threads=2)
    assert len(split.blocks) == 1
    assert split.matvec(np.ones(4, dtype=np.float32)).tolist() == [4.0] * 10
