! online_training.c in Fortran, through the kformer module: a simulation of B members of 1-D
! periodic advection-diffusion whose state arrays u(D, 1, B) and next(D, 1, B) go to kformer as
! they are (no copy) for online training of a surrogate of its time step and for inference.
!
!   online_training_fortran CHECKPOINT_PATH
program online_training
  use, intrinsic :: iso_c_binding
  use kformer
  implicit none
  integer, parameter :: B = 4, D = 8, STEPS = 400, TRAIN_EVERY = 2, REPORT_EVERY = 100
  real(c_double), parameter :: pi = 3.14159265358979323846d0, c = 1.0d0, nu = 0.05d0, &
    h = 1.0d0 / D, dt = 0.01d0
  real(c_double), target :: u(D, 1, B), next(D, 1, B), predicted(D, 1, B), again(D, 1, B)
  real(c_double) :: loss, error, left, right, here
  type(c_ptr) :: model, loaded
  character(len=4096) :: path
  integer :: n, i, m

  if (command_argument_count() /= 1) stop "usage: online_training_fortran CHECKPOINT_PATH"
  call get_command_argument(1, path)
  do m = 1, B
    do i = 1, D
      u(i, 1, m) = sin(2 * pi * (i - 1) * h + 0.5d0 * (m - 1)) + 0.5d0 * cos(4 * pi * (i - 1) * h)
    end do
  end do
  call check(kformer_initialize(), "kformer_initialize")
  call check(kformer_model_create_from_string(c_string( &
    '{"model": {"state_dim": 8, "d_model": 16, "heads": 2, "layers": 1, ' // &
    '"dim_feedforward": 32, "seed": 1}, ' // &
    '"optimizer": {"type": "adam", "learning_rate": 0.003}}'), model), "kformer_model_create")
  loss = 0
  do n = 1, STEPS
    do m = 1, B
      do i = 1, D
        left = u(modulo(i - 2, D) + 1, 1, m)
        right = u(modulo(i, D) + 1, 1, m)
        here = u(i, 1, m)
        next(i, 1, m) = here + dt * (-c * (right - left) / (2 * h) + &
                                     nu * (right - 2 * here + left) / (h * h))
      end do
    end do
    if (mod(n, TRAIN_EVERY) == 0) &
      call check(kformer_train_step_array(model, u, next, loss), "kformer_train_step")
    if (mod(n, REPORT_EVERY) == 0) then
      call check(kformer_forward_array(model, u, predicted), "kformer_forward")
      error = maxval(abs(predicted - next))
      write (*, '(a, i0, a, es16.9e2, a, es16.9e2)') "step ", n, " loss ", loss, " max_error ", error
    end if
    u = next
  end do
  call check(kformer_model_save(model, c_string(path)), "kformer_model_save")
  call check(kformer_model_load(c_string(path), loaded), "kformer_model_load")
  call check(kformer_forward_array(model, u, predicted), "kformer_forward")
  call check(kformer_forward_array(loaded, u, again), "kformer_forward")
  if (all(predicted == again)) then
    print '(a)', "reloaded model: same outputs"
  else
    print '(a)', "reloaded model: DIFFERENT"
  end if
  call check(kformer_model_destroy(loaded), "kformer_model_destroy")
  call check(kformer_model_destroy(model), "kformer_model_destroy")
  call check(kformer_finalize(), "kformer_finalize")
  if (any(predicted /= again)) error stop 1

contains

  subroutine check(status, what)
    integer(c_int), intent(in) :: status
    character(len=*), intent(in) :: what
    if (status /= KFORMER_OK) then
      write (*, '(a, a, i0, a, a)') what, " failed (", status, "): ", kformer_error_message()
      error stop 1
    end if
  end subroutine

end program online_training
